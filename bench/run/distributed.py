"""Workers of one run on one or many machines: which worker this process is and which device it uses.

Every worker pulls the run's pieces from the shared folder (:mod:`faithbench.bench.store.claims`,
:mod:`faithbench.bench.store.pieces`), so workers need no process group and no collective: torchrun's ranks, the
tasks of a SLURM job array and a second ``bench run`` of the same suite are all workers alike. Under torchrun each
rank takes a GPU of its node (``LOCAL_RANK``); with more processes than GPUs, or an explicit ``--device cuda:K``,
ranks share them. Worker 0 (torchrun's rank 0, or a process on its own) waits for the whole run and writes its tables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from faithbench.errors import UserError


def device_named(device: str) -> torch.device:
    """``--device``: ``auto`` (a GPU where this machine has one), ``cpu``, ``cuda`` or ``cuda:N``, as a torch device
    (whether that GPU exists is the run's check: a dry run plans for one it lacks)."""
    name = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise UserError(f"device {device!r} is not supported; valid: auto, cpu, cuda, cuda:N")
    return dev


def worker_device(requested: torch.device, *, local_rank: int, n_gpus: int) -> torch.device:
    """The device of the worker with ``local_rank`` on its node. ``requested`` is the resolved ``--device``
    (``cuda`` without an index means "a GPU per worker, in turn")."""
    if requested.type != "cuda":
        return requested
    if n_gpus < 1:
        raise RuntimeError("CUDA was requested but no GPU is visible")
    if requested.index is not None:  # everyone on the GPU the user named
        return requested
    return torch.device("cuda", local_rank % n_gpus)


def workers_sharing(requested: torch.device, *, local_rank: int, local: int, n_gpus: int) -> int:
    """How many of a node's ``local`` workers share the device of the one with ``local_rank`` (:func:`worker_device`):
    all of them on the CPU or on a GPU the user named; with a GPU per worker in turn, those of its turn."""
    if requested.type != "cuda" or requested.index is not None or n_gpus < 1:
        return max(1, local)
    return max(1, len(range(local_rank % n_gpus, local, n_gpus)))


@dataclass(frozen=True)
class Worker:
    """This process among the run's workers (torchrun's ``RANK`` of ``WORLD_SIZE``; 0 of 1 alone)."""

    rank: int = 0
    world: int = 1
    sharing: int = 1  # the workers on this worker's device (the dry run states their share of its memory)

    @property
    def first(self) -> bool:
        """Worker 0: it draws the progress, waits for every piece and returns the run's table."""
        return self.rank == 0

    @classmethod
    def start(cls, requested: torch.device) -> tuple[Worker, torch.device]:
        """This worker and its device, from torchrun's environment when there is one."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(), requested
        local_rank, local = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        n_gpus = torch.cuda.device_count() if requested.type == "cuda" else 0
        device = worker_device(requested, local_rank=local_rank, n_gpus=n_gpus)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        sharing = workers_sharing(requested, local_rank=local_rank, local=local, n_gpus=n_gpus)
        return cls(int(os.environ.get("RANK", "0")), world, sharing), device
