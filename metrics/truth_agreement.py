"""Agreement with the exact attribution of models whose attribution is known by construction (the ground-truth tier).

A hand-set model's adapter carries its truth (``ModelAdapter.truth``; :mod:`faithbench.models.truth.image_exact`):
the (B, H, W)
(text: (B, T)) exact attribution ``t`` of the explained logit, and the cell of every pixel. Both metrics compare a
method's map ``a`` with ``t`` feature by feature, at the resolution ``[truth] resolution`` names:

* ``patch`` (default): a feature is a cell of the model's grid, and a map's value there is its sum over the cell's
  pixels (what the map claims the cell contributes). The cell truth is exact for every input and target: it is
  the cells' Shapley value, which every attribution axiom system shares on an additive model.
* ``pixel``: every pixel is a feature; the pixel truth is the Aumann-Shapley split of each cell's truth, exact
  for every method on the linear cells and on the suite's data for its labels, a convention elsewhere
  (``docs/ground-truth.md``).

On a token model (:mod:`faithbench.models.truth.token_exact`) a feature is a word (not [CLS], [SEP] or padding) and the
resolution does not apply: the token truth is exact for every input and target.

Models without a truth get no row (the metrics do not apply). The ``oracle`` control is scored with the truth
itself: correlation 1 and mass 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_finite, check_tensor
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

RESOLUTIONS = ("patch", "pixel")
REFERENCE = "truth_correlation"  # the metric the report card ranks the tier's methods by (agreement with the truth)


def _pair(attributions: Tensor, truth: Tensor, feature_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Both as (B, F) float64 and the (B, F) bool mask of the features (all where ``feature_mask`` is None)."""
    check_tensor(attributions, "attributions", min_dim=2, floating=True)
    check_finite(attributions, "attributions")
    check_tensor(truth, "truth", min_dim=2, floating=True)
    if truth.shape != attributions.shape:
        raise ValueError(
            f"truth must have the attributions' shape {tuple(attributions.shape)}, got {tuple(truth.shape)}"
        )
    a, t = attributions.reshape(len(attributions), -1).double(), truth.reshape(len(truth), -1).double()
    if feature_mask is None:
        return a, t, torch.ones_like(a, dtype=torch.bool)
    if feature_mask.shape != attributions.shape or feature_mask.dtype != torch.bool:
        raise ValueError(f"feature_mask must be a bool tensor of shape {tuple(attributions.shape)}")
    return a, t, feature_mask.reshape(a.shape).to(a.device)


def cell_sums(maps: Tensor, cells: Tensor) -> Tensor:
    """(B, K) float64: ``A_k = sum_{p in cell k} a(p)`` for maps (B, H, W) and the (H, W) cell index of every pixel
    (cells 0..K-1)."""
    check_tensor(maps, "maps", min_dim=3, floating=True)
    if cells.shape != maps.shape[1:] or cells.dtype != torch.long:
        raise ValueError(f"cells must be an int64 tensor of shape {tuple(maps.shape[1:])}, got {tuple(cells.shape)}")
    flat = cells.reshape(-1).to(maps.device)
    out = torch.zeros(len(maps), int(flat.max()) + 1, dtype=torch.float64, device=maps.device)
    return out.index_add_(1, flat, maps.reshape(len(maps), -1).double())


def average_ranks(x: Tensor) -> Tensor:
    """(B, F) float64 ranks 1..F of every row, ties given the mean of the ranks they span."""
    s = x.sort(dim=1).values
    below = torch.searchsorted(s, x.contiguous(), right=False)  # entries < x
    up_to = torch.searchsorted(s, x.contiguous(), right=True)  # entries <= x
    return (below + up_to + 1).double() / 2


def truth_correlation(attributions: Tensor, truth: Tensor, feature_mask: Tensor | None = None) -> Scores:
    """Spearman rank correlation between a map and the truth over the F features of each sample.

        rho = sum_f (r_f - mean r)(q_f - mean q) / sqrt(sum_f (r_f - mean r)^2 sum_f (q_f - mean q)^2)

    with ``r = rank(a)`` and ``q = rank(t)`` (1..F, ties averaged): Pearson's correlation of the ranks, in
    [-1, 1]; 1 = the map orders the features as the truth does (scale-free: only the order counts, signs
    included). Undefined (NaN, flagged) where the map or the truth is constant over the features.

    Args:
        attributions, truth: (B, ...) per-sample features (cell sums: :func:`cell_sums`; pixel or token maps).
        feature_mask: (B, ...) bool, the features to compare (text: the words, not [CLS] / [SEP] / padding);
            None: every entry.
    """
    a, t, w = _pair(attributions, truth, feature_mask)
    inf = torch.tensor(torch.inf, dtype=torch.float64, device=a.device)
    r, q = average_ranks(torch.where(w, a, inf)), average_ranks(torch.where(w, t, inf))  # features keep 1..F
    n = w.sum(dim=1, keepdim=True).clamp(min=1)
    r = torch.where(w, r - torch.where(w, r, 0).sum(dim=1, keepdim=True) / n, 0)
    q = torch.where(w, q - torch.where(w, q, 0).sum(dim=1, keepdim=True) / n, 0)
    norm = (r.square().sum(dim=1) * q.square().sum(dim=1)).sqrt()
    undefined = norm == 0
    rho = ((r * q).sum(dim=1) / torch.where(undefined, 1, norm)).clamp(-1, 1)
    return Scores(values=torch.where(undefined, torch.nan, rho).float(), undefined=undefined)


def truth_mass(attributions: Tensor, truth: Tensor, feature_mask: Tensor | None = None) -> Scores:
    """Share of a map's positive mass on the features whose truth is positive.

        mass = sum_f max(a_f, 0) [t_f > 0] / sum_f max(a_f, 0)

    in [0, 1]; 1 = every positive attribution lies where the model's evidence for the class is (invariant to
    positive rescaling of the map). Undefined (NaN, flagged) where the map has no positive mass or the truth no
    positive feature.

    Args:
        attributions, truth: (B, ...) per-sample features (cell sums: :func:`cell_sums`; pixel or token maps).
        feature_mask: (B, ...) bool, the features to compare (text: the words); None: every entry.
    """
    a, t, w = _pair(attributions, truth, feature_mask)
    positive = a.clamp(min=0) * w
    total = positive.sum(dim=1)
    evidence = (t > 0) & w
    undefined = (total <= 0) | ~evidence.any(dim=1)
    inside = (positive * evidence).sum(dim=1)
    mass = inside / torch.where(undefined, 1, total)
    return Scores(values=torch.where(undefined, torch.nan, mass).float(), undefined=undefined)


# --------------------------------------------------------------------------- the suite's metrics


@dataclass(frozen=True)
class TruthConfig:
    """``[truth]``, shared by ``truth_correlation`` and ``truth_mass``."""

    resolution: str = "patch"  # the model's cells (exact for every input) or its pixels

    def __post_init__(self) -> None:
        check_choice(self.resolution, "resolution", RESOLUTIONS)


def applies(unit: Unit) -> str | None:
    if unit.model.truth is None:
        return f"model {unit.model.name!r} has no known attribution (only the hand-set models, e.g. truth_additive)"
    return None


def _metric(score: Callable[[Tensor, Tensor, Tensor | None], Scores]) -> Callable[[Unit, TruthConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: TruthConfig) -> MetricResult:
        x, labels, ids = unit.samples()
        params = to_dict(cfg) if unit.model.modality == "image" else {"resolution": "token"}  # text: a token
        if len(ids) == 0:
            return MetricResult.empty(params, "samples")
        truth = unit.per_model(("truth", "samples"), lambda: unit.model.truth(x, labels))
        if unit.method.capabilities.ground_truth:  # the oracle control: the truth itself
            maps = unit.timed_explanation("samples", lambda: unit.method.from_truth(truth))
        else:
            maps = unit.sample_maps()
        mask = unit.sample_feature_mask()  # text: the words; image: None (every pixel)
        if unit.model.modality == "image" and cfg.resolution == "patch":
            cells = unit.model.truth.cells
            maps, truth = cell_sums(maps, cells), cell_sums(truth, cells)
        scores = score(maps, truth, mask)
        return MetricResult(
            values=scores.values, undefined=scores.undefined, sample_ids=ids, params=params, explained="samples"
        )

    return evaluate


def cost(unit: Unit, cfg: TruthConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps (the oracle's: the truth itself); the truth comes from the model's weights, no forward."""
    return () if unit.method.capabilities.ground_truth else sample_maps_cost(unit)


CORRELATION = described(
    "truth_correlation",
    evaluate=_metric(truth_correlation),
    cost=cost,
    config=TruthConfig,
    applies=applies,
)
MASS = described("truth_mass", evaluate=_metric(truth_mass), cost=cost, config=TruthConfig, applies=applies)
