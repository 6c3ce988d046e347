"""Sparseness of an explanation: Shannon entropy and the Gini index.

Both treat every non-batch entry of the map as one feature (pass (B, H, W) for pixels, (B, T)
for tokens, block-pooled maps for blocks) and depend only on |a|, so they are invariant to
positive rescaling and to the sign of the map. An all-zero map is undefined: NaN, flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import Tensor

from metrics._checks import check_finite, check_tensor
from metrics.spec import MetricResult, MetricSpec, NoConfig, Unit
from metrics.types import Scores


def _abs_distribution(attributions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    check_tensor(attributions, "attributions", min_dim=2, floating=True)
    check_finite(attributions, "attributions")
    a = attributions.reshape(attributions.shape[0], -1).abs()
    a = a.to(torch.promote_types(a.dtype, torch.float32))  # half precision sums are too coarse
    total = a.sum(dim=1)
    undefined = total <= 0
    return a, total, undefined


def explanation_entropy(attributions: Tensor, *, normalise: bool = False) -> Scores:
    """Shannon entropy (natural log) of the normalised absolute attribution.

        p_i = |a_i| / sum_j |a_j|,    H = -sum_i p_i ln p_i   (0 ln 0 = 0)

    ``normalise=True`` divides by ln n (n features per sample), giving a value in [0, 1] that
    compares across map sizes. H = 0 for a one-feature map, ln n for a uniform map; lower is
    sparser. Equals Quantus ``Complexity(abs=True, normalise=False)``.
    """
    a, total, undefined = _abs_distribution(attributions)
    n = a.shape[1]
    if normalise and n < 2:
        raise ValueError("normalised entropy needs at least 2 features per sample (ln 1 = 0)")
    p = a / torch.where(undefined, 1, total).unsqueeze(1)
    h = -torch.special.xlogy(p, p).sum(dim=1)
    if normalise:
        h = h / math.log(n)
    h = torch.where(undefined, torch.full_like(h, float("nan")), h)
    return Scores(values=h.to(attributions.dtype), undefined=undefined)


def gini_index(attributions: Tensor) -> Scores:
    """Gini index of |a| (Hurley & Rickard 2009; Chalasani et al. 2020), higher is sparser.

    With |a| sorted ascending, a_(1) <= ... <= a_(n):

        G = sum_i (2i - n - 1) a_(i) / (n sum_i a_(i))

    G = 0 for a uniform map and 1 - 1/n for a map with a single non-zero feature. Equals
    Quantus ``Sparseness(abs=True, normalise=False)`` except that Quantus adds 1e-7 to every entry.
    """
    a, total, undefined = _abs_distribution(attributions)
    n = a.shape[1]
    sorted_a = a.sort(dim=1).values
    weights = 2 * torch.arange(1, n + 1, dtype=a.dtype, device=a.device) - n - 1
    g = (sorted_a * weights).sum(dim=1) / (n * torch.where(undefined, 1, total))
    g = torch.where(undefined, torch.full_like(g, float("nan")), g)
    return Scores(values=g.to(attributions.dtype), undefined=undefined)


# --------------------------------------------------------------------------- the suite's metrics


def _map_metric(score: Callable[[Tensor], Scores]) -> Callable[[Unit, NoConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: NoConfig) -> MetricResult:
        _, _, ids = unit.samples()
        if len(ids) == 0:
            return MetricResult.empty({"features": "pixels"}, "samples")
        res = score(unit.sample_maps())
        return MetricResult(res.values, res.undefined, ids, {"features": "pixels"}, "samples")

    return evaluate


ENTROPY = MetricSpec(
    "entropy",
    "Shannon entropy of |a| / sum |a|",
    False,
    ("image", "text"),
    1,
    "nats",
    _map_metric(explanation_entropy),
)
ENTROPY_NORMALISED = MetricSpec(
    "entropy_normalised",
    "entropy divided by ln(number of features), in [0, 1]",
    False,
    ("image", "text"),
    1,
    "",
    _map_metric(partial(explanation_entropy, normalise=True)),
)
GINI = MetricSpec(
    "gini", "Gini index of |a| (sparseness), in [0, 1)", True, ("image", "text"), 1, "", _map_metric(gini_index)
)
