"""Inputs per model call from the device's memory: a suite's ``max_batch = "auto"`` (the default).

On the CPU ``auto`` is :data:`CPU_MAX_BATCH` inputs per call: there a call's time goes with its size, and small calls
stay in the caches. On a GPU a 28 px model's call is thousands of small kernels whatever its size, so the time goes
with the number of calls: each model's calls there take as many inputs as :data:`MEMORY_SHARE` of the device's free
memory holds, shared by the run's workers on that device (``Worker.sharing``), between :data:`LEAST` and
:data:`MOST`. What one input costs is measured, not guessed, by two probes of the model on copies of its largest input
(a grid of images where a metric explains whole grids; the metrics' own inputs at their own size), each the difference
of two batch sizes per row:

- with gradients (a method's calls, ``max_batch``): the bytes autograd keeps for the backward pass, the bulk of a
  forward and backward's memory (:data:`HEADROOM` covers the backward's own buffers);
- without (a metric's own perturbed inputs, ``eval_batch``): the peak of the tensors alive at once in a forward
  pass, tracked op by op; 1.3x (a plain CNN) to 13x (a ViT at 28 px) below the first on the zoo.

Both count the same bytes on every device, so a dry run on a CPU plans a GPU's calls: it probes the zoo's
architectures (random weights have the same shapes) and assumes :data:`ASSUMED_FREE_GIB` of free memory on a GPU it
cannot see. With memory-sized calls a unit also explains more inputs per call: its batch size is at least a quarter of
its ``max_batch`` (the ratio of the suite's defaults, 64 and 256). A number (``--max-batch N``) is used as given.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

AUTO = "auto"
CPU_MAX_BATCH = 256  # inputs per call on the CPU, and for a model the probe cannot measure (text models)
LEAST, MOST = 256, 16384  # memory-sized calls: multiples of the CPU's, up to this (returns fall off long before)
MEMORY_SHARE = 0.5  # of the free device memory for the calls' activations (the rest: models, maps, the allocator)
HEADROOM = 1.25  # a forward and backward's peak over the bytes it saves (14.6 vs 14.0 MB per 84 px B-cos grid)
ASSUMED_FREE_GIB = 80.0  # a dry run's GPU that this machine cannot see: an H100's memory


@dataclass(frozen=True)
class Sizes:
    """A model's call sizes in a run: ``batch_size`` inputs explained per call, at most ``max_batch`` inputs per model
    call; ``eval_rows``: inputs per call of a metric's own inputs (None: ``4 * batch_size``, at most ``max_batch``);
    ``row_bytes``: the probes' bytes per input with and without gradients (None: not probed); ``budget``: the bytes
    the calls may take (None: not memory-sized)."""

    batch_size: int
    max_batch: int
    eval_rows: int | None = None
    row_bytes: tuple[int, int] | None = None
    budget: int | None = None
    sized_at: int = 1  # max_batch holds for inputs this many model input sizes across; smaller ones take more rows

    @property
    def eval_batch(self) -> int:
        """Inputs per call of a metric's own inputs (:attr:`~faithbench.metrics.spec.Unit.eval_batch`)."""
        return min(4 * self.batch_size, self.max_batch) if self.eval_rows is None else self.eval_rows

    @property
    def call_bytes(self) -> int | None:
        """The largest call's bytes by the probes (with gradients at ``max_batch``, without at ``eval_batch``)."""
        if self.row_bytes is None:
            return None
        grad, plain = self.row_bytes
        return max(grad * self.max_batch, plain * self.eval_batch)

    def text(self) -> str:
        """One line on how the sizes were chosen."""
        if self.budget is None or self.row_bytes is None:
            return f"batch_size {self.batch_size}, max_batch {self.max_batch}"
        grad, plain = (b / 2**20 for b in self.row_bytes)
        return (
            f"batch_size {self.batch_size}, max_batch {self.max_batch} ({grad:.2f} MB per input with gradients), "
            f"eval_batch {self.eval_batch} ({plain:.2f} MB without), in {self.budget / 2**30:.1f} GiB"
        )


def saved_bytes(module: nn.Module, inputs: Tensor) -> int:
    """The bytes autograd keeps for the backward pass of one forward of ``module`` on ``inputs`` (each storage once)."""
    storages: dict[tuple[int, str], int] = {}

    def pack(t: Tensor) -> Tensor:
        storages[_key(t)] = t.untyped_storage().nbytes()
        return t

    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(inputs.detach().clone().requires_grad_(True))
    return sum(storages.values())


class _Alive(TorchDispatchMode):
    """The most bytes of tensors that ops made and that are alive at once (each storage once, freed with its last
    tensor; views of the ``known`` storages, the weights and the inputs, are not new memory)."""

    def __init__(self, known: set[tuple[int, str]]) -> None:
        super().__init__()
        self.known = known
        self.refs: dict[tuple[int, str], int] = {}
        self.size: dict[tuple[int, str], int] = {}
        self.now = self.peak = 0

    def _drop(self, key: tuple[int, str]) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.now -= self.size.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.untyped_storage().nbytes():
                key = _key(t)
                if key in self.known:
                    continue
                if key not in self.refs:
                    self.refs[key], self.size[key] = 0, t.untyped_storage().nbytes()
                    self.now += self.size[key]
                    self.peak = max(self.peak, self.now)
                self.refs[key] += 1
                weakref.finalize(t, self._drop, key)
        return out


def peak_bytes(module: nn.Module, inputs: Tensor) -> int:
    """The most bytes of tensors alive at once in a forward of ``module`` on ``inputs`` without gradients."""
    known = {_key(t) for t in (inputs, *module.parameters(), *module.buffers())}
    with torch.no_grad(), _Alive(known) as alive:
        module(inputs)
    return alive.peak


def _key(t: Tensor) -> tuple[int, str]:
    return t.untyped_storage().data_ptr(), str(t.device)


def row_bytes(module: nn.Module, example: Tensor) -> tuple[int, int]:
    """Bytes one input of ``example``'s shape (model-input space) adds to a forward and backward (the saved tensors:
    3 rows less 1, halved; the weights, saved in both, cancel) and to a forward without gradients (the peak: 24 rows
    less 8, over 16; enough rows that the inputs, not the weights' temporaries, make the peak)."""

    def rows(n: int) -> Tensor:
        return example[:1].expand(n, *example.shape[1:]).contiguous()

    grad = (saved_bytes(module, rows(3)) - saved_bytes(module, rows(1))) // 2
    plain = (peak_bytes(module, rows(24)) - peak_bytes(module, rows(8))) // 16
    return max(1, grad), max(1, plain)


def free_bytes(device: torch.device) -> int | None:
    """The device's free memory, with what this process's allocator holds but does not use (None: not a GPU)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def model_sizes(
    batch_size: int,
    max_batch: int | str,
    free: int | None,
    probe: Callable[[], tuple[int, int] | None],
    workers: int = 1,
    sized_at: int = 1,
) -> Sizes:
    """A model's :class:`Sizes`: ``max_batch`` as given, or ``auto``: the CPU's where ``free`` is None (no GPU), else
    as many inputs as ``MEMORY_SHARE * free / workers`` bytes hold at ``probe()``'s bytes per input with and without
    gradients (None: the model cannot be probed; the CPU's sizes), with gradients for inputs ``sized_at`` model input
    sizes across (the probe's)."""
    if max_batch != AUTO:
        return Sizes(batch_size, int(max_batch))
    per_row = probe() if free is not None else None
    if per_row is None:
        return Sizes(batch_size, CPU_MAX_BATCH)
    budget = int(MEMORY_SHARE * free / workers)
    # whole multiples of the CPU's 256: the same sizes over small swings of free memory from run to run
    grad, plain = (min(MOST, max(LEAST, int(budget / (HEADROOM * b)) // LEAST * LEAST)) for b in per_row)
    return Sizes(max(batch_size, grad // 4), grad, max(plain, grad), per_row, budget, sized_at)


def suite_max_batch(max_batch: int | str) -> int:
    """Inputs per call of the work before any unit (predictions, shared selections): under ``auto`` the CPU's."""
    return CPU_MAX_BATCH if max_batch == AUTO else int(max_batch)


def image_probe(
    module: nn.Module | None, model: Any, image: Tensor | None, scales: tuple[int, int], tiled: bool = True
) -> Callable[[], tuple[int, int] | None]:
    """The probe of ``model`` (its adapter; ``module``: its network, or an architecture of it) in a run: a model
    without image inputs, no ``module`` or no ``image``: none (None); else :func:`row_bytes` of ``module`` on
    ``image`` (one, in [0, 1]) tiled ``scale`` x ``scale`` and encoded, with gradients at the first of ``scales`` (the
    largest inputs it explains) and without at the second (the largest the metrics score). A model that takes only
    its own input size is probed there and charged the area's ``scale**2``; so is every model when ``tiled`` is
    False (a dry run probing an ImageNet architecture on the CPU for a GPU plan: 24 rows of 3 x 3 tiled 224 px images
    would need tens of GiB of host memory)."""

    def at(scale: int) -> tuple[int, int]:
        weight = next(module.parameters(), None)
        one = image[:1].to(weight.device if weight is not None else "cpu")
        if scale > 1 and tiled:
            try:
                return row_bytes(module, model.encode(one.repeat(1, 1, scale, scale)))
            except (RuntimeError, ValueError, AssertionError):  # e.g. a fixed positional embedding or linear head
                pass
        grad, plain = row_bytes(module, model.encode(one))
        return grad * scale**2, plain * scale**2

    def probe() -> tuple[int, int] | None:
        if module is None or image is None or model.modality != "image":
            return None
        explained, scored = scales
        grad = at(explained)
        return grad[0], (grad if scored == explained else at(scored))[1]

    return probe
