"""What a metric asks of one piece of a unit, for the run's cost estimate (``MetricSpec.cost``)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricCost:
    """One computation a metric asks of one piece of a unit, for the run's cost estimate (``bench run --dry-run``,
    :mod:`faithbench.bench.estimate.counts`): ``explanations`` (input, target) pairs of the unit's method and ``inputs``
    model inputs of the metric's own (perturbed images, predictions), each in ``passes`` equal runs (a run's
    explanations ``explain_batch``, its inputs ``eval_batch`` per call); ``repeats`` consecutive pairs share one input
    (GridPG's cells on their grid: methods that share equal inputs explain it once). Equal ``key``s are one
    computation, counted once per ``scope``: ``unit`` (per unit and piece) or ``model`` (shared by a model's units:
    once per model and piece). ``note``: why the count is an estimate ("" where it is exact)."""

    key: Hashable
    explanations: int = 0
    inputs: int = 0
    repeats: int = 1
    passes: int = 1
    scope: str = "unit"
    note: str = ""

    def requests(self, eval_batch: int) -> list[int]:
        """The sizes of the model calls its own inputs make on their own, in order."""
        runs = (-(-self.inputs // self.passes),) * self.passes if self.inputs else ()
        return [min(eval_batch, r - s) for r in runs for s in range(0, r, eval_batch)]
