"""The timing engine of ``python -m bench perf``: the sides of every ratio timed in turns.

A ratio compares an implementation (side A) with its limit or with Quantus (side B, C). One time per side,
taken at different moments, lets the load of other jobs decide the ratio on a shared machine. So the sides
run in turns: ``warmup`` rounds first (discarded), then ``repeats`` rounds, each calling every side once in
order, A B A B ... (A B C A B C ... with Quantus as a third side). Every run is timed on its own
(``time.perf_counter``; CUDA synchronised before and after; Python's garbage collector off while the
rounds run); a function faster than ``min_seconds`` is called several times in one run (:func:`in_turns`).
The runs of one round ran next to each other, so load that comes and goes over seconds hits both sides of
a pair alike: a ratio is taken pair by pair, ``A_i / B_i`` for round i, and reported as the
median over the rounds with the min-max of the pairs (:func:`pair_ratio`); each side as its median
seconds with their min-max. A ratio to a physical limit whose median is below ``FLOOR`` (0.95) is no result
but a measurement error (:attr:`Ratio.status`): no implementation does less than the work it cannot avoid.

What each row times: :mod:`faithbench.bench.perf.harness`; the methods' limits: :mod:`faithbench.bench.perf.limits`.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from faithbench.models import MODELS, load_model
from faithbench.models.adapter import ModelAdapter

FLOOR = 0.95  # a ratio to a limit below this is a measurement error, not a result
OK, MEASUREMENT_ERROR = "ok", "measurement error"
MAX_CALLS = 1000  # calls in one timed run at most (``min_seconds``)


@dataclass(frozen=True)
class Side:
    """One side's timed runs (seconds, in round order), its last run's result and model-call batch sizes, and
    its peak CUDA memory over the timed runs (NaN on the CPU)."""

    times: tuple[float, ...]
    result: Any
    sizes: tuple[int, ...]
    peak_mb: float

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def low(self) -> float:
        return min(self.times)

    @property
    def high(self) -> float:
        return max(self.times)


@dataclass(frozen=True)
class Ratio:
    """A ratio taken pair by pair: the median over the pairs and the lowest and highest pair."""

    median: float
    low: float
    high: float

    @property
    def status(self) -> str:
        """``ok``, or ``measurement error`` where the median is below ``FLOOR`` (for ratios to a limit)."""
        return MEASUREMENT_ERROR if self.median < FLOOR else OK


def pair_ratio(a: Side, b: Side, scale: float = 1.0) -> Ratio:
    """``scale * a_i / b_i`` for every round i (the runs of a round ran next to each other): median, min, max."""
    ratios = [scale * x / y if y > 0 else math.inf for x, y in zip(a.times, b.times, strict=True)]
    return Ratio(statistics.median(ratios), min(ratios), max(ratios))


class CallCounter:
    """Records the batch size of every call of ``module`` (a forward pre-hook) until ``close``, and of every call of
    a deep copy of it (the hook is copied with the module, the counter is not); while ``keep`` is set, also a copy of
    every call's input (:func:`probe`)."""

    def __init__(self, module: nn.Module) -> None:
        self.sizes: list[int] = []
        self.inputs: list[Tensor] = []
        self.keep = False
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        first = next((v for v in (*args, *kwargs.values()) if isinstance(v, Tensor)), None)
        self.sizes.append(1 if first is None or first.dim() == 0 else int(first.shape[0]))
        if self.keep and first is not None:
            self.inputs.append(first.detach().clone())

    def __deepcopy__(self, memo: dict) -> CallCounter:
        """A deep copy of the module (a randomisation test's randomised copy) keeps this counter: its calls count."""
        return self

    def close(self) -> None:
        self._handle.remove()


@dataclass(frozen=True)
class Probe:
    """An untimed run: its result, the batch sizes of its model calls and a copy of each call's input."""

    result: Any
    sizes: tuple[int, ...]
    inputs: tuple[Tensor, ...]


def probe(fn: Callable[[], Any], counter: CallCounter) -> Probe:
    """One untimed run of ``fn``, its model calls recorded (:class:`Probe`)."""
    counter.sizes.clear()
    counter.inputs.clear()
    counter.keep = True
    try:
        result = fn()
    finally:
        counter.keep = False
    inputs, counter.inputs = tuple(counter.inputs), []
    return Probe(result, tuple(counter.sizes), inputs)


def in_turns(
    fns: Sequence[Callable[[], Any]],
    *,
    repeats: int,
    warmup: int,
    device: torch.device,
    counter: CallCounter | None = None,
    min_seconds: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Side]:
    """Every function of ``fns`` once per round, in order: ``warmup`` rounds untimed, then ``repeats`` rounds
    with each run timed on its own by ``clock``. Returns one :class:`Side` per function.

    With ``min_seconds`` (and a warm-up), a run of a function faster than that is made of as many calls as its
    last warm-up call fits into ``min_seconds`` (its time: the run's time over the calls), so that no sample is
    so short that one interruption of the process decides it; the model-call sizes are the last call's."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cuda = device.type == "cuda"
    calls = [1] * len(fns)
    for _ in range(warmup):
        for k, fn in enumerate(fns):
            start = clock() if min_seconds > 0 else 0.0
            fn()
            if min_seconds > 0:
                _sync(device)
                calls[k] = min(MAX_CALLS, max(1, math.ceil(min_seconds / max(clock() - start, 1e-9))))
    times: list[list[float]] = [[] for _ in fns]
    results: list[Any] = [None] * len(fns)
    sizes: list[tuple[int, ...]] = [()] * len(fns)
    peaks = [math.nan] * len(fns)
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            for k, fn in enumerate(fns):
                _sync(device)
                if cuda:
                    torch.cuda.reset_peak_memory_stats(device)
                start = clock()
                for call in range(calls[k]):
                    if counter is not None and call == calls[k] - 1:
                        counter.sizes.clear()
                    results[k] = fn()
                _sync(device)
                times[k].append((clock() - start) / calls[k])
                if counter is not None:
                    sizes[k] = tuple(counter.sizes)
                if cuda:
                    peak = torch.cuda.max_memory_allocated(device) / 2**20
                    peaks[k] = peak if math.isnan(peaks[k]) else max(peaks[k], peak)
    finally:
        if collecting:
            gc.enable()
    return [Side(tuple(t), r, s, p) for t, r, s, p in zip(times, results, sizes, peaks, strict=True)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def replay(module: nn.Module, inputs: Sequence[Tensor]) -> Callable[[], None]:
    """A limit made of forward passes: ``module`` on each of ``inputs`` (the inputs of the model calls a probe
    recorded: the same calls, in the same order, with the same values) under no_grad."""

    def run() -> None:
        with torch.no_grad():
            for x in inputs:
                module(x)

    return run


def build_model(name: str, device: torch.device, seed: int) -> ModelAdapter:
    """A registered model; torchvision ones with random weights (seeded), as the timing needs no training."""
    torch.manual_seed(seed)
    kwargs = {"weights": None} if MODELS.get(name).source == "torchvision" else {}
    return load_model(name, device=device, **kwargs)
