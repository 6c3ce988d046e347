"""Completeness gap: how far a map's total is from what the method claims it sums to.

For a method that claims completeness (native W(x)x and LRP: the explained logit minus the
model's constant logit bias; IntegratedGradients: f(x) - f(baseline)), per sample

    gap = |sum_p a(p) - r| / |r|,     r = the claimed total

(0 = complete; 0.21 = 21 % of the logit missing or extra). Undefined (NaN, counted) where r = 0.
Methods without a claim get no row: the metric does not apply to them.

A ViT's logit also holds its positional embeddings' contribution ``W(x) p`` (see
:func:`faithbench.models.adapter.positional_contribution`), which no pixel can carry.
``[completeness] positional_term``:
``"separate"`` (default) takes it out of the claimed total, ``r = logit - bias - W(x) p``, and the
``positional_share`` metric reports it, ``|W(x) p| / |logit - bias|``; ``"in-claim"`` holds the map to the
whole logit (the positional share then shows up as gap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_finite, check_tensor
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

if TYPE_CHECKING:
    from faithbench.models.adapter import ModelAdapter


def completeness_gap(attributions: Tensor, reference: Tensor) -> Scores:
    """Relative gap between each map's total and its claimed total.

    Args:
        attributions: (B, ...) maps (summed over every non-batch dim).
        reference: (B,) the totals the method claims.

    Example:
        >>> import torch
        >>> from faithbench.metrics.completeness import completeness_gap
        >>> maps = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])  # sums to 10
        >>> completeness_gap(maps, torch.tensor([8.0])).values  # |10 - 8| / |8|
        tensor([0.2500])
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


POSITIONAL_TERMS = ("separate", "in-claim")


@dataclass(frozen=True)
class CompletenessConfig:
    """``[completeness]``, shared by ``completeness_gap`` and ``positional_share``."""

    positional_term: str = "separate"  # the positional embeddings' W(x) p: its own term, or part of the map's claim

    def __post_init__(self) -> None:
        check_choice(self.positional_term, "positional_term", POSITIONAL_TERMS)


def applies(unit: Unit) -> str | None:
    if not unit.method.completeness:
        return f"method {unit.method.name!r} makes no completeness claim"
    return None


def _per_sample(unit: Unit, name: str, compute: Callable[[ModelAdapter, Tensor, Tensor], Tensor], b: int) -> Tensor:
    """``compute(model, inputs, targets)`` over this shard's samples, ``b`` at a time, once per unit."""

    def run() -> Tensor:
        x, t, _ = unit.samples()
        return torch.cat(in_chunks(lambda s, e: compute(unit.model, x[s:e], t[s:e]), len(x), b))

    return unit.memo(("completeness", name), run)


def _positional(unit: Unit) -> Tensor:
    """The positional term per sample: a backward pass, so at most ``max_batch`` at a time."""
    return _per_sample(unit, "positional", unit.method.positional_term, min(unit.eval_batch, unit.max_batch))


def evaluate(unit: Unit, cfg: CompletenessConfig) -> MetricResult:
    _, _, ids = unit.samples()
    params = {"claim": unit.method.completeness}
    # Recorded where it acts: on models without a positional term the setting changes nothing.
    params |= to_dict(cfg) if unit.method.has_positional_term(unit.model) else {}
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    ref = _per_sample(unit, "claim", unit.method.completeness_target, unit.eval_batch)
    if "positional_term" in params and cfg.positional_term == "separate":
        ref = ref - _positional(unit)
        params["claim"] += " - positional term"
    scores = completeness_gap(unit.sample_maps(), ref)
    return MetricResult(
        values=scores.values, undefined=scores.undefined, sample_ids=ids, params=params, explained="samples"
    )


def positional_share(positional: Tensor, claim: Tensor) -> Tensor:
    """|W(x) p| / |logit - bias| per sample: the share of the logit that the positional embeddings carry (NaN
    where the claim is 0).

    Example:
        >>> import torch
        >>> from faithbench.metrics.completeness import positional_share
        >>> positional_share(torch.tensor([0.5, -1.0]), torch.tensor([2.0, 4.0]))  # |0.5| / |2|, |-1| / |4|
        tensor([0.2500, 0.2500])
    """
    if positional.shape != claim.shape or positional.dim() != 1:
        raise ValueError(
            f"positional and claim must be (B,) tensors, got {tuple(positional.shape)} and {tuple(claim.shape)}"
        )
    share = positional.double().abs() / claim.double().abs()
    return torch.where(claim == 0, torch.nan, share).float()


def positional_applies(unit: Unit) -> str | None:
    if not unit.method.has_positional_term(unit.model):
        return f"method {unit.method.name!r} has no positional term on model {unit.model.name!r}"
    return None


def evaluate_positional(unit: Unit, cfg: CompletenessConfig) -> MetricResult:
    _, _, ids = unit.samples()
    params = {"claim": unit.method.completeness}
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    claim = _per_sample(unit, "claim", unit.method.completeness_target, unit.eval_batch)
    share = positional_share(_positional(unit), claim)
    return MetricResult(values=share, undefined=share.isnan(), sample_ids=ids, params=params, explained="samples")


def _claim_cost(unit: Unit) -> tuple[MetricCost, MetricCost]:
    """The claimed totals (the method's ``completeness_inputs`` model inputs per sample) and W(x) p (one per sample)."""
    n, per = len(unit.take(len(unit.sample_ids))), unit.method.completeness_inputs
    claim = MetricCost(("completeness", "claim"), inputs=n * per, passes=per)
    return claim, MetricCost(("completeness", "positional"), inputs=n)


def cost(unit: Unit, cfg: CompletenessConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps, the claimed totals and, where it is its own term, the positional term."""
    claim, positional = _claim_cost(unit)
    separate = unit.method.has_positional_term(unit.model) and cfg.positional_term == "separate"
    return (*sample_maps_cost(unit), claim, *((positional,) if separate else ()))


def positional_cost(unit: Unit, cfg: CompletenessConfig) -> tuple[MetricCost, ...]:
    """The claimed totals and the positional term (shared with ``completeness_gap``)."""
    return _claim_cost(unit)


SPEC = described("completeness_gap", evaluate=evaluate, cost=cost, config=CompletenessConfig, applies=applies)

POSITIONAL_SHARE = described(
    "positional_share",
    evaluate=evaluate_positional,
    cost=positional_cost,
    config=CompletenessConfig,
    applies=positional_applies,
)
