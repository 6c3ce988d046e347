"""Completeness gap: how far a map's total is from what the method claims it sums to.

For a method that claims completeness (native W(x)x and LRP: the explained logit minus the
model's constant logit bias; IntegratedGradients: f(x) - f(baseline)), per sample

    gap = |sum_p a(p) - r| / |r|,     r = the claimed total

(0 = complete; 0.21 = 21 % of the logit missing or extra). Undefined (NaN, counted) where r = 0.
Methods without a claim get no row: the metric does not apply to them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from metrics._checks import check_finite, check_tensor
from metrics.spec import MetricResult, MetricSpec, Unit
from metrics.types import Scores


def completeness_gap(attributions: Tensor, reference: Tensor) -> Scores:
    """Relative gap between each map's total and its claimed total.

    Args:
        attributions: (B, ...) maps (summed over every non-batch dim).
        reference: (B,) the totals the method claims.
    """
    check_tensor(attributions, "attributions", min_dim=1, floating=True)
    check_finite(attributions, "attributions")
    if reference.shape != attributions.shape[:1]:
        raise ValueError(f"reference must have shape ({attributions.shape[0]},), got {tuple(reference.shape)}")
    total = attributions.reshape(len(attributions), -1).double().sum(dim=1)
    ref = reference.double()
    undefined = ref == 0
    gap = (total - ref).abs() / ref.abs()
    return Scores(values=torch.where(undefined, torch.nan, gap).float(), undefined=undefined)


def applies(unit: Unit) -> str | None:
    if not unit.method.completeness:
        return f"method {unit.method.name!r} makes no completeness claim"
    return None


def evaluate(unit: Unit, cfg: object) -> MetricResult:
    x, t, ids = unit.samples()
    params = {"claim": unit.method.completeness}
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    maps = unit.sample_maps()
    b = unit.eval_batch
    ref = torch.cat(
        [unit.method.completeness_target(unit.model, x[s : s + b], t[s : s + b]) for s in range(0, len(x), b)]
    )
    scores = completeness_gap(maps, ref)
    return MetricResult(scores.values, scores.undefined, ids, params, "samples")


SPEC = MetricSpec(
    name="completeness_gap",
    description="|sum(map) - claimed total| / |claimed total| (methods that claim completeness)",
    higher_is_better=False,
    modalities=("image", "text"),
    scale=100,
    unit="%",
    evaluate=evaluate,
    applies=applies,
)
