"""Pooled model calls: a unit's metrics take turns, and their perturbed inputs are scored together.

Every removal metric asks the model about its own perturbed inputs, ``eval_batch`` at a time: on a GPU, where time
goes with the number of calls rather than their size, seven such metrics of a unit cost seven calls where one would
carry them all. So :func:`run_pooled` runs a unit's metric hooks as tasks that take turns: greenlets, coroutines on the
caller's thread (never two at once, nothing they share touched concurrently, the order fixed, and the kernels on the
thread and thread pool they always use: measured, the same IG in a second OS thread took twice as long on 2 cores).
Each runs until it asks :attr:`Unit.forward <faithbench.metrics.spec.Unit.forward>` for scores, or returns. When
every live task waits, their requests are joined in task order and scored in calls of at most ``cap`` inputs
(requests with other shapes or side inputs in calls of their own); each task gets its rows back and runs on.

A request is scored beside other metrics' inputs: the scores agree with separate calls to the last bits a model's
batch composition moves (as another ``max_batch`` does). A pooled call's count, time and inputs are shared among the
metrics whose inputs it carried, in proportion to them (``model_calls`` of a metric can be fractional; a unit's sum is
its calls).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from greenlet import greenlet
from torch import Tensor, nn

from faithbench.bench.run.counters import Cost, Meter, read_peak, reset_peak


class _Cancelled(BaseException):
    """Thrown into a waiting task when the pool stops (another task failed, or the run was interrupted)."""


@dataclass
class Turn:
    """What one task cost: its own work (explanations, its code) and its share of the pooled calls."""

    cost: Cost = field(default_factory=Cost)
    seconds: float = 0.0  # wall time of its turns, and its share of the pooled calls'
    explain_seconds: float = 0.0  # of which explanations (reported apart)

    def charge_peak(self, peak: float) -> None:
        before = self.cost.peak_memory_mb
        self.cost.peak_memory_mb = peak if before != before else max(before, peak)  # NaN: none yet


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
        turn.charge_peak(read_peak(device))
        turn.seconds += time.perf_counter() - start
        turn.explain_seconds += explained() - before


@dataclass
class _Task:
    fn: Callable[[], Any]
    glet: greenlet | None = None
    turn: Turn = field(default_factory=Turn)
    request: tuple[Tensor, dict[str, Tensor]] | None = None
    reply: Tensor | None = None
    result: Any = None

    @property
    def done(self) -> bool:
        return self.glet is not None and self.glet.dead


class Pool:
    """Runs tasks in turns and their model requests in pooled calls of ``module`` (at most ``cap`` inputs each)."""

    def __init__(self, module: nn.Module, cap: int, device: torch.device, meter: Meter, explained: Callable[[], float]):
        self.module, self.cap, self.device, self.meter, self.explained = module, cap, device, meter, explained
        self._tasks: dict[greenlet, _Task] = {}
        self._scheduler: greenlet | None = None

    def forward(self, inputs: Tensor, **extra: Tensor) -> Tensor:
        """Scores of ``inputs`` (no gradients), asked from inside a task: it waits for the pooled call."""
        task = self._hand_over((inputs, extra))
        reply, task.reply = task.reply, None
        assert reply is not None
        return reply

    __call__ = forward

    def wait(self) -> None:
        """From inside a task: let the others take their turns (it waits for what another one computes)."""
        self._hand_over(None)

    def _hand_over(self, request: tuple[Tensor, dict[str, Tensor]] | None) -> _Task:
        task = self._tasks.get(greenlet.getcurrent())
        if task is None:
            raise RuntimeError("the pool's forward and wait are for its tasks (the metrics it runs)")
        # The tasks share one thread and so its autograd mode: each keeps its own across the switch.
        task.request, grad = request, torch.is_grad_enabled()
        assert self._scheduler is not None
        self._scheduler.switch()
        torch.set_grad_enabled(grad)
        return task

    def run(self, fns: Sequence[Callable[[], Any]]) -> list[tuple[Any, Turn]]:
        """Each of ``fns`` run to its end in turns; (its result, what it cost) in order. A task's error is raised
        here, after the others are stopped."""
        self._scheduler, grad = greenlet.getcurrent(), torch.is_grad_enabled()
        tasks, idle = [_Task(fn) for fn in fns], 0
        try:
            for task in tasks:
                task.glet = greenlet(self._body(task, grad))
                self._tasks[task.glet] = task
                self._resume(task)
            while True:
                waiting = [t for t in tasks if not t.done]
                if not waiting:
                    return [(t.result, t.turn) for t in tasks]
                asking = [t for t in waiting if t.request is not None]
                idle = 0 if asking else idle + 1
                if idle > 1:  # every task waits for what another computes, twice over: none of them can move
                    raise RuntimeError("the metrics wait for each other's shared computations: none can go on")
                self._score(asking)
                for task in waiting:
                    self._resume(task)
        finally:
            try:
                self._stop(tasks)
            finally:
                torch.set_grad_enabled(grad)

    def _body(self, task: _Task, grad: bool) -> Callable[[], None]:
        def body() -> None:
            torch.set_grad_enabled(grad)  # the caller's mode, whatever the task before left
            task.result = task.fn()

        return body

    def _resume(self, task: _Task) -> None:
        """Let ``task`` run until it asks for scores or ends (its error raised here); its time, explanations and
        model calls are its own."""
        assert task.glet is not None
        with charging(task.turn, self.meter, self.device, self.explained):
            task.glet.switch()

    def _score(self, waiting: list[_Task]) -> None:
        """Every waiting request scored: those that fit together joined, in task order, in calls of ``cap``."""
        groups: dict[tuple, list[_Task]] = {}
        for task in waiting:
            assert task.request is not None
            x, extra = task.request
            shape = tuple((k, v.shape[1:], v.dtype) for k, v in sorted(extra.items()))
            groups.setdefault((x.shape[1:], x.dtype, x.device, shape), []).append(task)
        for group in groups.values():
            requests = [t.request for t in group]
            sizes = [len(x) for x, _ in requests]  # type: ignore[misc]
            pooled = Turn()  # shared by its tasks in proportion to their rows
            with charging(pooled, self.meter, self.device, lambda: 0.0), torch.no_grad():
                parts = [self.module(x, **extra) for x, extra in _calls(requests, self.cap)]  # type: ignore[arg-type]
            total = max(sum(sizes), 1)
            for task, part, size in zip(group, torch.cat(parts).split(sizes), sizes, strict=True):
                task.reply, task.request = part, None
                task.turn.charge_peak(pooled.cost.peak_memory_mb)
                task.turn.cost.model_calls += pooled.cost.model_calls * size / total
                task.turn.cost.model_inputs += size
                task.turn.seconds += pooled.seconds * size / total

    def _stop(self, tasks: list[_Task]) -> None:
        """End every task still waiting (:class:`_Cancelled` thrown in at its switch); whatever their ends raise,
        the error that stopped the pool is the one its caller sees."""
        self.meter.target = None
        for task in tasks:
            if task.glet is not None and not task.done:
                try:
                    task.glet.throw(_Cancelled())
                except BaseException:  # noqa: BLE001, S110 - the pool's own error (or its end) is what is raised
                    pass


def _calls(requests: list, cap: int) -> Iterator[tuple[Tensor, dict[str, Tensor]]]:
    """The requests, joined in order, cut into calls of at most ``cap`` rows, one at a time: each copies only its own
    rows (the round's requests are never joined whole). Requests without rows: one call of the first (empty)."""
    if not any(len(x) for x, _ in requests):
        yield requests[0]
        return
    rows, extras, room = [], [], cap
    for x, extra in requests:
        at = 0
        while at < len(x):
            take = min(room, len(x) - at)
            rows.append(x[at : at + take])
            extras.append({k: v[at : at + take] for k, v in extra.items()})
            at, room = at + take, room - take
            if room == 0:
                yield _joined(rows, extras)
                rows, extras, room = [], [], cap
    if rows:
        yield _joined(rows, extras)


def _joined(rows: list[Tensor], extras: list[dict[str, Tensor]]) -> tuple[Tensor, dict[str, Tensor]]:
    if len(rows) == 1:
        return rows[0], extras[0]
    return torch.cat(rows), {k: torch.cat([e[k] for e in extras]) for k in extras[0]}


def run_pooled(
    module: nn.Module,
    cap: int,
    device: torch.device,
    meter: Meter,
    explained: Callable[[], float],
    fns: Sequence[Callable[[Callable[..., Tensor] | None], Any]],
    pooled: bool = True,
) -> list[tuple[Any, Turn]]:
    """Each ``fn(forward)`` run with the pool (``pooled``: :meth:`Pool.forward`, :meth:`Pool.wait`) or with None (each
    task on its own, in order, the model called directly); (its result, its :class:`Turn`) in order.
    ``explained()``: the unit's explanation seconds so far."""
    if pooled:
        pool = Pool(module, cap, device, meter, explained)
        return pool.run([lambda fn=fn: fn(pool) for fn in fns])
    out = []
    for fn in fns:
        turn = Turn()
        with charging(turn, meter, device, explained):
            out.append((fn(None), turn))
    return out


def pooled_calls(requests: Sequence[Sequence[int]], cap: int) -> int:
    """The model calls of pooled tasks whose requests have these sizes, in order: round r joins every task's r-th
    request and scores them in calls of ``cap`` (what :class:`Pool` does when their shapes agree)."""
    rounds = max((len(r) for r in requests), default=0)
    return sum(-(-sum(r[i] for r in requests if i < len(r)) // cap) for i in range(rounds))
