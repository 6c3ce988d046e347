"""Sparseness of an explanation: Shannon entropy, the Gini index and the effective complexity.

Both treat every non-batch entry of the map as one feature (pass (B, H, W) for pixels, (B, T)
for tokens, block-pooled maps for blocks), or those a feature mask selects (text: the tokens without
[CLS], [SEP] and padding), and depend only on |a| (the entropy's ``positive`` variant: on max(a, 0)),
so they are invariant to positive rescaling. A map without mass is undefined: NaN, flagged.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from faithbench.metrics._checks import check_finite, check_tensor
from faithbench.metrics.spec import MetricCost, MetricResult, NoConfig, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores


def _distribution(attributions: Tensor, positive: bool, feature_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """(|a| or max(a, 0) flattened, with non-features set to 0; number of features per sample; undefined)."""
    check_tensor(attributions, "attributions", min_dim=2, floating=True)
    check_finite(attributions, "attributions")
    a = attributions.reshape(attributions.shape[0], -1)
    a = a.clamp(min=0) if positive else a.abs()
    a = a.to(torch.promote_types(a.dtype, torch.float32))  # half precision sums are too coarse
    if feature_mask is None:
        n = torch.full((a.shape[0],), a.shape[1], device=a.device)
    else:
        if feature_mask.shape != attributions.shape or feature_mask.dtype != torch.bool:
            raise ValueError(f"feature_mask must be a bool tensor of shape {tuple(attributions.shape)}")
        mask = feature_mask.reshape(a.shape)
        a, n = a * mask, mask.sum(dim=1)
    return a, n, a.sum(dim=1) <= 0


def explanation_entropy(
    attributions: Tensor, *, normalise: bool = False, positive: bool = False, feature_mask: Tensor | None = None
) -> Scores:
    """Shannon entropy (natural log) of the normalised absolute (or positive) attribution.

        p_i = |a_i| / sum_j |a_j|   (``positive``: max(a_i, 0) / sum_j max(a_j, 0)),   H = -sum_i p_i ln p_i

    over the features ``feature_mask`` selects (default every entry; text: the tokens without [CLS], [SEP] and
    padding), 0 ln 0 = 0. ``normalise=True`` divides by ln n (n features of the sample), giving a value in
    [0, 1] that compares across map sizes. H = 0 for a one-feature map, ln n for a uniform map; lower is
    sparser. Without ``positive`` and mask it equals Quantus ``Complexity(abs=True, normalise=False)``. A map
    with no (positive) mass is undefined: NaN, flagged.

    Example:
        >>> import torch
        >>> from faithbench.metrics import explanation_entropy
        >>> maps = torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[2.0, -2.0], [0.0, 0.0]]])
        >>> explanation_entropy(maps).values  # ln 4 (uniform) and ln 2 (two equal |a|)
        tensor([1.3863, 0.6931])
        >>> explanation_entropy(maps, normalise=True).values  # divided by ln 4
        tensor([1.0000, 0.5000])
    """
    a, n, undefined = _distribution(attributions, positive, feature_mask)
    if normalise and bool((n < 2).any()):
        raise ValueError("normalised entropy needs at least 2 features per sample (ln 1 = 0)")
    total = a.sum(dim=1)
    p = a / torch.where(undefined, 1, total).unsqueeze(1)
    h = -torch.special.xlogy(p, p).sum(dim=1)
    if normalise:
        h = h / n.to(h.dtype).log()
    h = torch.where(undefined, torch.full_like(h, float("nan")), h)
    return Scores(values=h.to(attributions.dtype), undefined=undefined)


def gini_index(attributions: Tensor, *, feature_mask: Tensor | None = None) -> Scores:
    """Gini index of |a| (Hurley & Rickard 2009; Chalasani et al. 2020), higher is sparser.

    With the n features' |a| sorted ascending, a_(1) <= ... <= a_(n) (``feature_mask``: as for the entropy):

        G = sum_i (2i - n - 1) a_(i) / (n sum_i a_(i))

    G = 0 for a uniform map and 1 - 1/n for a map with a single non-zero feature. Equals
    Quantus ``Sparseness(abs=True, normalise=False)`` except that Quantus adds 1e-7 to every entry.

    Example:
        >>> import torch
        >>> from faithbench.metrics import gini_index
        >>> maps = torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[4.0, 0.0], [0.0, 0.0]]])
        >>> gini_index(maps).values  # 0 for a uniform map, (n - 1) / n when one of n features holds it all
        tensor([0.0000, 0.7500])
    """
    a, n, undefined = _distribution(attributions, False, feature_mask)
    size = a.shape[1]
    if feature_mask is not None:  # non-features sort first and get weight 0
        a = a.masked_fill(~feature_mask.reshape(a.shape), -1.0)
    sorted_a = a.sort(dim=1).values.clamp(min=0)
    rank = torch.arange(1, size + 1, dtype=a.dtype, device=a.device) - (size - n.to(a.dtype)).unsqueeze(1)
    weights = (2 * rank - n.to(a.dtype).unsqueeze(1) - 1) * (rank >= 1)
    total = sorted_a.sum(dim=1)
    g = (sorted_a * weights).sum(dim=1) / (n * torch.where(undefined, 1, total))
    g = torch.where(undefined, torch.full_like(g, float("nan")), g)
    return Scores(values=g.to(attributions.dtype), undefined=undefined)


def effective_complexity(attributions: Tensor, *, eps: float = 1e-5, feature_mask: Tensor | None = None) -> Scores:
    """How many features carry more than ``eps`` of the map's largest |a| (Nguyen & Martinez 2020; Quantus'
    ``EffectiveComplexity``):

        effective_complexity = #{i : |a_i| / max_j |a_j| > eps}

    over the features ``feature_mask`` selects (default every entry), lower is sparser; invariant to positive
    rescaling. Quantus' default divides by the largest |a| of the whole batch, so a sample's count there depends on
    the other samples in its batch; here each map by its own. A map without mass is undefined: NaN, flagged.

    Example:
        >>> import torch
        >>> from faithbench.metrics.complexity import effective_complexity
        >>> effective_complexity(torch.tensor([[[1.0, -0.5], [1e-7, 0.0]]])).values  # two above 1e-5 of the max
        tensor([2.])
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0 (a share of the largest |a|), got {eps!r}")
    a, _, undefined = _distribution(attributions, False, feature_mask)
    peak = a.amax(dim=1, keepdim=True)
    count = (a > eps * peak).sum(dim=1).to(a.dtype)
    return Scores(values=torch.where(undefined, torch.nan, count), undefined=undefined)


# --------------------------------------------------------------------------- the suite's metrics


def _map_metric(score: Callable[..., Scores]) -> Callable[[Unit, NoConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: NoConfig) -> MetricResult:
        _, _, ids = unit.samples()
        params = {"features": "tokens" if unit.model.modality == "text" else "pixels"}
        if len(ids) == 0:
            return MetricResult.empty(params, "samples")
        res = score(unit.sample_maps(), feature_mask=unit.sample_feature_mask())
        return MetricResult(
            values=res.values, undefined=res.undefined, sample_ids=ids, params=params, explained="samples"
        )

    return evaluate


def cost(unit: Unit, cfg: NoConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps (the score itself asks no model)."""
    return sample_maps_cost(unit)


ENTROPY = described("entropy", cost=cost, evaluate=_map_metric(explanation_entropy))
ENTROPY_NORMALISED = described(
    "entropy_normalised",
    cost=cost,
    evaluate=_map_metric(partial(explanation_entropy, normalise=True)),
)
ENTROPY_POSITIVE = described(
    "entropy_positive",
    cost=cost,
    evaluate=_map_metric(partial(explanation_entropy, positive=True)),
)
GINI = described("gini", cost=cost, evaluate=_map_metric(gini_index))
EFFECTIVE_COMPLEXITY = described("effective_complexity", cost=cost, evaluate=_map_metric(effective_complexity))
