"""One unit: a (model, method) pair, every metric of the suite, per-sample records for the result files.

The runner calls :func:`evaluate_unit` with the plan's resolved metrics; it calls each spec's hook with the same
signature (:mod:`faithbench.metrics.spec`). No metric is named here and no registry is consulted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from faithbench.bench.run.counters import Cost, Turn, charging, metering
from faithbench.bench.run.pairing import items_of
from faithbench.bench.run.plan import MetricJob
from faithbench.bench.run.suite import Suite
from faithbench.metrics.spec import MetricResult, MetricSpec, Unit

if TYPE_CHECKING:
    from faithbench.attributions import AttributionMethod
    from faithbench.models import ModelAdapter
    from faithbench.models.data.datasets import EvalData


def to_record(
    spec: MetricSpec, result: MetricResult, explain_s: float, metric_s: float, cost: Cost | None = None
) -> dict[str, Any]:
    """A metric's results as plain data in the reported scale (JSON-able, host-side)."""
    curve, fractions = result.curve, result.fractions
    return {
        "values": (result.values.double() * spec.scale).cpu().tolist(),
        "undefined": result.undefined.cpu().tolist(),
        "sample_ids": result.sample_ids.cpu().tolist(),
        "unit": spec.unit,
        "higher_is_better": spec.higher_is_better,
        "params": result.params,
        "explain_time_s": explain_s,
        "explained": result.explained,  # which explanation the time is of (the per-sample maps, grids, ...)
        "metric_time_s": metric_s,
        **(asdict(cost) if cost is not None else {}),
        "curve": None if curve is None else curve.double().cpu().tolist(),
        "fractions": None if fractions is None else fractions.double().cpu().tolist(),
    }


def suite_unit(
    suite: Suite,
    model: ModelAdapter,
    method: AttributionMethod,
    data: EvalData,
    sample_ids: torch.Tensor,
    device: torch.device,
    max_batch: int,
    **state: Any,
) -> Unit:
    """A (model, method) unit on ``suite``'s data, at most ``max_batch`` inputs per model call (where
    :func:`faithbench.calls.in_chunks` starts);
    ``state``: the caller's own fields (the shard, the model's cache, the map store, the shared items: those of the
    model's group, :func:`~faithbench.bench.run.pairing.items_of`)."""
    if state.get("shared"):
        state = state | {"shared": items_of(state["shared"], model.name)}
    return Unit(
        model=model,
        method=method,
        images=data.images,
        labels=data.labels,
        sample_ids=sample_ids,
        batch_size=suite.batch_size,
        device=device,
        max_batch=max_batch,
        **state,
    )


def evaluate_unit(unit: Unit, metrics: Sequence[MetricJob]) -> dict[str, dict[str, Any]]:
    """This piece's per-sample records of every metric in ``metrics`` (the plan's).

    Each metric runs on its own, in order. A metric's time excludes the explanations it triggered (shared, reported
    as explain time); its model calls and peak memory include them (the first metric that needs an explanation pays
    for it).
    """
    chosen = [m for m in metrics if m.spec.evaluates(unit)]
    done = []
    with metering(unit.model.module) as meter:
        for metric in chosen:
            turn = Turn()
            with charging(turn, meter, unit.device, lambda: sum(unit.explain_time.values())):
                done.append((metric.spec.evaluate(unit, metric.config), turn))
    records = {}
    for metric, (result, turn) in zip(chosen, done, strict=True):
        explain_s = unit.explanation_seconds(result.explained)
        metric_s = max(turn.seconds - turn.explain_seconds, 0.0)
        records[metric.name] = to_record(metric.spec, result, explain_s, metric_s, turn.cost)
    return records
