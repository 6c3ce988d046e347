"""Sharding a run over processes (``torchrun``): which device and backend each rank uses.

Every rank evaluates the items i with i % world_size == rank and rank 0 gathers the per-sample
scores. With one GPU per process, ranks use NCCL on their own GPU; with more processes on a node
than GPUs (or an explicit ``--device cuda:K``), ranks share the GPUs and talk through gloo (the
gathered objects are small); on CPU, gloo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


def plan_distributed(
    requested: torch.device, *, local_rank: int, local_world: int, n_gpus: int
) -> tuple[str, torch.device]:
    """(backend, device) of one rank. ``requested`` is the resolved ``--device`` (``cuda`` without an
    index means "a GPU per rank")."""
    if requested.type != "cuda":
        return "gloo", requested
    if n_gpus < 1:
        raise RuntimeError("CUDA was requested but no GPU is visible")
    if requested.index is not None:  # everyone on the GPU the user named
        return "gloo", requested
    device = torch.device("cuda", local_rank % n_gpus)
    return ("nccl" if local_world <= n_gpus else "gloo"), device


@dataclass
class Shard:
    """This process's share of the work: items i with i % world == rank."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @classmethod
    def start(cls, requested: torch.device) -> tuple[Shard, torch.device]:
        """Join the process group when run under torchrun; returns the shard and this rank's device."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(), requested
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        n_gpus = torch.cuda.device_count() if requested.type == "cuda" else 0
        backend, device = plan_distributed(requested, local_rank=local_rank, local_world=local_world, n_gpus=n_gpus)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group(backend=backend)
        return cls(dist.get_rank(), dist.get_world_size()), device

    def gather(self, obj: Any) -> list[Any] | None:
        if not self.distributed:
            return [obj]
        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj: Any) -> Any:
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def close(self) -> None:
        if self.distributed:
            dist.barrier()
            dist.destroy_process_group()
