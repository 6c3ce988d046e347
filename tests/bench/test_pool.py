"""Pooled model calls (bench.run.pool): a unit's metrics take turns and their inputs share calls, with the scores
and the inputs of separate calls, fewer calls, each metric's cost its share, and errors that stop every turn."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from faithbench.bench.run.counters import Meter, metering
from faithbench.bench.run.pool import Pool, _calls, pooled_calls, run_pooled


class Sizes(nn.Module):
    """A linear model that logs the size of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.append(len(x))
        return self.linear(x.flatten(1))


def _asking(sizes: list[int], seed: int, model: nn.Module):
    """A task that asks for the scores of random inputs of these sizes, in turn, and returns (inputs, scores); not
    pooled (forward None), it calls the model itself."""

    def task(forward):
        gen = torch.Generator().manual_seed(seed)
        asked = [torch.rand(n, 3, generator=gen) for n in sizes]
        return asked, [(forward or model)(x) for x in asked]

    return task


def _run(model, tasks, pooled, cap=8):
    with metering(model) as meter:
        return run_pooled(model, cap, torch.device("cpu"), meter, lambda: 0.0, tasks, pooled)


def test_pooled_requests_share_calls_and_get_their_own_scores():
    model = Sizes()
    done = _run(model, [_asking([4, 4, 2], 0, model), _asking([4, 1], 1, model), _asking([], 2, model)], pooled=True)
    assert model.sizes == [8, 5, 2]  # round by round: 4 + 4, 4 + 1, 2 (without pooling: 4, 4, 2, 4, 1)
    assert pooled_calls([[4, 4, 2], [4, 1], []], 8) == 3  # what the dry run counts
    with torch.no_grad():
        for (asked, scores), _ in done:
            for x, s in zip(asked, scores, strict=True):
                torch.testing.assert_close(s, model.linear(x))
    calls = [turn.cost.model_calls for _, turn in done]
    assert [turn.cost.model_inputs for _, turn in done] == [10, 5, 0]
    assert sum(calls) == pytest.approx(3) and calls[0] == pytest.approx(4 / 8 + 4 / 5 + 1)  # shares by inputs
    model.sizes.clear()
    alone = _run(model, [_asking([4, 4, 2], 0, model), _asking([4, 1], 1, model)], pooled=False)
    assert model.sizes == [4, 4, 2, 4, 1] and [t.cost.model_calls for _, t in alone] == [3, 2]


def test_requests_of_other_shapes_are_called_apart_and_the_cap_holds():
    model = Sizes()

    def wide(forward):
        return forward(torch.rand(6, 3)), forward(torch.rand(6, 3))

    def other(forward):  # another shape cannot join: calls of its own
        return forward(torch.rand(2, 1, 3)), forward(torch.rand(2, 1, 3))

    _run(model, [wide, wide, other], pooled=True, cap=5)
    assert model.sizes == [5, 5, 2, 2] * 2  # each round: 12 in calls of 5 (5, 5, 2), then the other shape alone


def test_a_failing_task_stops_the_others_and_raises():
    model, seen, ended = Sizes(), [], []

    def fails(forward):
        forward(torch.rand(2, 3))
        raise ValueError("bad metric")

    def long(forward):
        try:
            for _ in range(5):
                seen.append(forward(torch.rand(2, 3)))
        finally:
            ended.append(True)

    with pytest.raises(ValueError, match="bad metric"):
        _run(model, [long, fails], pooled=True)
    assert len(seen) == 1 and ended == [True]  # its first reply, then stopped at its second request


def test_tasks_keep_their_autograd_mode_and_the_callers_thread():
    model, modes, threads = Sizes(), [], set()

    def scoring(forward):
        with torch.no_grad():
            forward(torch.rand(2, 3))  # hands over its turn inside no_grad
            modes.append(("scoring", torch.is_grad_enabled()))

    def explaining(forward):
        threads.add(threading.get_ident())
        modes.append(("explaining", torch.is_grad_enabled()))  # runs while the other waits inside no_grad
        x = torch.rand(2, 3, requires_grad=True)
        model(x).sum().backward()
        forward(torch.rand(2, 3))
        return x.grad is not None

    done = _run(model, [scoring, explaining], pooled=True)
    assert done[1][0] and modes == [("explaining", True), ("scoring", False)]
    assert threads == {threading.get_ident()} and torch.is_grad_enabled()


def test_tasks_that_only_wait_for_each_other_are_refused():
    pool = Pool(Sizes(), 8, torch.device("cpu"), Meter(), lambda: 0.0)

    def waits_forever():
        while True:
            pool.wait()

    with pytest.raises(RuntimeError, match="wait for each other"):
        pool.run([waits_forever, waits_forever])


def test_calls_are_cut_one_at_a_time_and_empty_requests_still_reach_the_model():
    requests = [(torch.rand(3, 3), {}), (torch.rand(4, 3), {}), (torch.rand(0, 3), {})]
    calls = _calls(requests, 5)
    first = next(calls)  # built before the next one is: a round is never joined whole
    assert len(first[0]) == 5 and torch.equal(first[0], torch.cat([requests[0][0], requests[1][0][:2]]))
    assert [len(x) for x, _ in calls] == [2]
    model = Sizes()
    done = _run(model, [lambda f: f(torch.rand(0, 3)), lambda f: f(torch.rand(0, 3))], pooled=True)
    assert model.sizes == [0] and [r.shape for r, _ in done] == [(0, 2), (0, 2)]
