"""One unit: a (model, method) pair, every metric of the suite, per-sample records for the result files.

The runner calls :func:`evaluate_unit` with the plan's resolved metrics; it calls each spec's hook with the same
signature (:mod:`faithbench.metrics.spec`). No metric is named here and no registry is consulted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from faithbench.bench.run.counters import Cost, measuring
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
    **state: Any,
) -> Unit:
    """A (model, method) unit on ``suite``'s data with its batch sizes; ``state``: the caller's own fields (the
    shard, the model's cache, the map store, the shared items)."""
    return Unit(
        model=model,
        method=method,
        images=data.images,
        labels=data.labels,
        sample_ids=sample_ids,
        batch_size=suite.batch_size,
        device=device,
        max_batch=suite.max_batch,
        **state,
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def evaluate_unit(unit: Unit, metrics: Sequence[MetricJob]) -> dict[str, dict[str, Any]]:
    """This piece's per-sample records of every metric in ``metrics`` (the plan's).

    A metric's time excludes the explanations it triggered (shared, reported as explain time); its
    model calls and peak memory include them (the first metric that needs an explanation pays for it).
    """
    records = {}
    for metric in metrics:
        name, spec = metric.name, metric.spec
        if spec.applies is not None and spec.applies(unit) is not None:
            continue  # e.g. a completeness gap for a method that claims no completeness: no row
        if unit.method.capabilities.ground_truth and not spec.ground_truth:
            continue  # the oracle has maps only where the metric has a ground truth
        explained_before = sum(unit.explain_time.values())
        with measuring(unit.model.module, unit.device) as cost:
            start = time.perf_counter()
            result = spec.evaluate(unit, metric.config)
            _sync(unit.device)
            spent = time.perf_counter() - start - (sum(unit.explain_time.values()) - explained_before)
        explain_s = unit.explanation_seconds(result.explained)
        records[name] = to_record(spec, result, explain_s, max(spent, 0.0), cost)
    return records
