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


@dataclass
class _Task:
    fn: Callable[[], Any]
    glet: greenlet | None = None
    turn: Turn = field(default_factory=Turn)
    request: tuple[Tensor, dict[str, Tensor]] | None = None
    reply: Tensor | None = None
    result: Any = None
    done: bool = False


class Pool:
    """Runs tasks in turns and their model requests in pooled calls of ``module`` (at most ``cap`` inputs each)."""

    def __init__(self, module: nn.Module, cap: int, device: torch.device, meter: Meter, explained: Callable[[], float]):
        self.module, self.cap, self.device, self.meter, self.explained = module, cap, device, meter, explained
        self._tasks: dict[greenlet, _Task] = {}
        self._scheduler: greenlet | None = None

    def forward(self, inputs: Tensor, **extra: Tensor) -> Tensor:
        """Scores of ``inputs`` (no gradients), asked from inside a task: it waits for the pooled call."""
        task = self._tasks.get(greenlet.getcurrent())
        if task is None:  # not one of the pool's tasks (a metric called outside it): a call of its own
            with torch.no_grad():
                return self.module(inputs, **extra)
        self._hand_over(task, (inputs, extra))
        reply, task.reply = task.reply, None
        assert reply is not None
        return reply

    __call__ = forward

    def wait(self) -> None:
        """From inside a task: let the others take their turns (it waits for what another one computes)."""
        task = self._tasks.get(greenlet.getcurrent())
        if task is None:
            raise RuntimeError("Pool.wait() is for the pool's tasks")
        self._hand_over(task, None)

    def _hand_over(self, task: _Task, request: tuple[Tensor, dict[str, Tensor]] | None) -> None:
        # The tasks share one thread and so its autograd mode: each keeps its own across the switch.
        task.request, grad = request, torch.is_grad_enabled()
        assert self._scheduler is not None
        self._scheduler.switch()
        torch.set_grad_enabled(grad)

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
            task.done = True

        return body

    def _resume(self, task: _Task) -> None:
        """Let ``task`` run until it asks for scores or ends (its error raised here); its time, explanations and
        model calls are its own."""
        assert task.glet is not None
        self.meter.target = task.turn.cost
        explained, start = self.explained(), time.perf_counter()
        reset_peak(self.device)
        try:
            task.glet.switch()
        finally:
            self.meter.target = None
            task.done = task.done or task.glet.dead
            self._charge_peak([task])
            task.turn.seconds += time.perf_counter() - start
            task.turn.explain_seconds += self.explained() - explained

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
            pooled, start = Cost(), time.perf_counter()
            self.meter.target = pooled
            reset_peak(self.device)
            with torch.no_grad():
                parts = [self.module(x, **extra) for x, extra in _calls(requests, self.cap)]  # type: ignore[arg-type]
            self.meter.target = None
            self._charge_peak(group)
            out = torch.cat(parts)
            spent, total = time.perf_counter() - start, max(sum(sizes), 1)
            for task, begin, size in zip(group, _starts(sizes), sizes, strict=True):
                task.reply, task.request = out[begin : begin + size], None
                task.turn.cost.model_calls += pooled.model_calls * size / total
                task.turn.cost.model_inputs += size
                task.turn.seconds += spent * size / total

    def _charge_peak(self, tasks: list[_Task]) -> None:
        peak = read_peak(self.device)
        for task in tasks:
            before = task.turn.cost.peak_memory_mb
            task.turn.cost.peak_memory_mb = peak if before != before else max(before, peak)  # NaN: none yet

    def _stop(self, tasks: list[_Task]) -> None:
        """End every task still waiting (:class:`_Cancelled` thrown in at its switch); whatever their ends raise,
        the error that stopped the pool is the one its caller sees."""
        self.meter.target = None
        for task in tasks:
            if task.glet is not None and not task.glet.dead:
                try:
                    task.glet.throw(_Cancelled())
                except BaseException:  # noqa: BLE001, S110 - the pool's own error (or its end) is what is raised
                    pass


def _starts(sizes: list[int]) -> list[int]:
    return [sum(sizes[:i]) for i in range(len(sizes))]


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
        meter.target, before, start = turn.cost, explained(), time.perf_counter()
        reset_peak(device)
        try:
            result = fn(None)
            turn.cost.peak_memory_mb = read_peak(device)
        finally:
            meter.target = None
        turn.seconds, turn.explain_seconds = time.perf_counter() - start, explained() - before
        out.append((result, turn))
    return out


def pooled_calls(requests: Sequence[Sequence[int]], cap: int) -> int:
    """The model calls of pooled tasks whose requests have these sizes, in order: round r joins every task's r-th
    request and scores them in calls of ``cap`` (what :class:`Pool` does when their shapes agree)."""
    rounds = max((len(r) for r in requests), default=0)
    return sum(-(-sum(r[i] for r in requests if i < len(r)) // cap) for i in range(rounds))
