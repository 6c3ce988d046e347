"""What a unit costs besides wall time: model calls, inputs the model saw, peak device memory (the report's
cost section and plot: :mod:`faithbench.bench.report.cost`)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class Cost:
    """Outermost forward calls of a model (a call of a sub-module inside another call is not counted; a
    sub-module called on its own is: ``native_normalised`` runs layer 0 and then the remaining layers of a
    B-cosified ``Sequential`` one by one, so each counts), the inputs they carried (the first dimension
    of the call's output: Captum's DeepLift passes inputs and baselines as separate arguments that a
    hook joins), and the peak device memory in MiB (CUDA only; NaN on the CPU, where torch keeps no
    allocator statistics). Work a model's units share (the grid selection of a grid metric, the
    predicted classes) is paid by the unit that runs first."""

    model_calls: int = 0
    model_inputs: int = 0
    peak_memory_mb: float = math.nan


class Meter:
    """Counts a module's outermost forward calls, and the inputs they carried, into whichever :class:`Cost` is its
    ``target`` at the time (None: not counted): the runner points it at each metric in turn."""

    def __init__(self) -> None:
        self.target: Cost | None = None
        self._depth = 0

    def enter(self, *_: Any) -> None:
        if self._depth == 0 and self.target is not None:
            self.target.model_calls += 1
        self._depth += 1

    def leave(self, _: nn.Module, args: tuple, output: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and self.target is not None:
            out = output[0] if isinstance(output, tuple | list) and output else output
            self.target.model_inputs += int(out.shape[0]) if isinstance(out, torch.Tensor) and out.dim() else 1


@contextlib.contextmanager
def metering(module: nn.Module) -> Iterator[Meter]:
    """A :class:`Meter` on ``module``'s calls inside the block (copies made inside it, such as a sanity check's
    randomised model, carry its hooks and count too)."""
    meter = Meter()

    # plain functions, not the meter's bound methods: deepcopy keeps functions but would copy a method's meter
    def enter(*args: Any) -> None:
        meter.enter(*args)

    def leave(*args: Any) -> None:
        meter.leave(*args)

    hooks = []
    for m in module.modules():
        hooks.append(m.register_forward_pre_hook(enter))
        hooks.append(m.register_forward_hook(leave, always_call=True))
    try:
        yield meter
    finally:
        for hook in hooks:
            hook.remove()


def reset_peak(device: torch.device) -> None:
    """Start a peak-memory window on ``device`` (CUDA; nothing elsewhere)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def read_peak(device: torch.device) -> float:
    """The peak device memory in MiB since :func:`reset_peak` (NaN off CUDA)."""
    if device.type != "cuda":
        return math.nan
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**20


@contextlib.contextmanager
def measuring(module: nn.Module, device: torch.device) -> Iterator[Cost]:
    """Count ``module``'s forward calls and the peak memory on ``device`` inside the block."""
    cost = Cost()
    with metering(module) as meter:
        meter.target = cost
        reset_peak(device)
        try:
            yield cost
        finally:
            cost.peak_memory_mb = read_peak(device)


@dataclass
class Turn:
    """What one metric of a unit cost: its model calls and peak memory (the explanations it triggered included), its
    wall time, and of that the explanations' seconds (reported apart)."""

    cost: Cost = field(default_factory=Cost)
    seconds: float = 0.0
    explain_seconds: float = 0.0


@contextlib.contextmanager
def charging(turn: Turn, meter: Meter, device: torch.device, explained: Callable[[], float]) -> Iterator[None]:
    """Charge what the block does to ``turn``: the model calls the meter counts, its peak memory, its wall time and,
    of that, the unit's explanation seconds (``explained()``) it added."""
    meter.target, before, start = turn.cost, explained(), time.perf_counter()
    reset_peak(device)
    try:
        yield
    finally:
        meter.target = None
        turn.cost.peak_memory_mb = read_peak(device)
        turn.seconds += time.perf_counter() - start
        turn.explain_seconds += explained() - before
