"""Consistency (Dasgupta et al., ICML 2022; Quantus' ``Consistency``): do samples that get the same
explanation get the same prediction? Each map is turned into a discrete explanation ``e_i = D(a_i)`` and compared
with those of the other samples ``j`` of the set, whose model predictions are ``f(x_j)``::

    consistency_i = #{j != i : e_j = e_i and f(x_j) = f(x_i)} / #{j != i : e_j = e_i}

the share of the other samples with the same explanation that also get the same prediction (Dasgupta et al.'s local
consistency, its probability estimated over the set). Higher is better: 1 where every sample that shares the
explanation shares the prediction. A sample whose explanation no other sample has gives no evidence: undefined
(Quantus gives it 0).

The map is first divided by its own largest ``|entry|`` (``normalise``) and made positive (``absolute``), as Quantus'
``normalise_by_max`` and ``abs`` do, then flattened row by row, and ``D`` (``discretise``) is one of:

    top_n_sign        the signs of the first ``top_n`` entries (Quantus' default ``top_n_sign``, n = 5: the first
                      pixels of the map's top row, not its largest entries)
    sign              the signs of every entry (Quantus' ``sign``)
    floating_points   every entry rounded to ``decimals`` decimals (Quantus' ``floating_points``, n = 2)
    rank              the entries' order from the largest to the smallest (Quantus' ``rank``: ``argsort`` reversed;
                      ties here by position, the later one first)
    top_n_positions   the positions of the ``top_n`` largest entries, as a set (ties: the earlier position)

Two explanations are equal when every discretised entry is (compared as numbers: Quantus compares hashes of their
bytes, where -0.0 and 0.0 differ; with ``absolute`` there is no -0.0). The comparison set is the unit's samples, or
in a suite split into ``pieces`` the samples of the sample's piece (every ``pieces``-th sample: a smaller, evenly
spread set; every row records ``pieces``). Quantus compares within each call batch (``batch_size = 64``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

DISCRETISATIONS = ("top_n_sign", "sign", "floating_points", "rank", "top_n_positions")
TARGETS = ("label", "predicted")


def prepared(maps: Tensor, *, normalise: bool = True, absolute: bool = True) -> Tensor:
    """(B, F) the maps flattened, each divided by its largest ``|entry|`` (``normalise``; a map 0 everywhere stays as
    it is) and made positive (``absolute``), in that order (Quantus' ``normalise_by_max`` per map, then ``abs``).

    >>> import torch
    >>> from faithbench.metrics.consistency import prepared
    >>> prepared(torch.tensor([[[2.0, -4.0]], [[0.0, 0.0]]]))
    tensor([[0.5000, 1.0000],
            [0.0000, 0.0000]])
    """
    flat = maps.reshape(maps.shape[0], -1)
    if normalise:
        peak = flat.abs().amax(dim=1, keepdim=True)
        flat = flat / peak.where(peak > 0, 1.0)
    return flat.abs() if absolute else flat


def discretised(flat: Tensor, discretise: str = "top_n_sign", *, top_n: int = 5, decimals: int = 2) -> Tensor:
    """(B, K) the discrete explanations ``D(a)`` of prepared maps ``flat`` (B, F) (see the module docstring): two rows
    are the same explanation when all their entries are equal.

    >>> import torch
    >>> from faithbench.metrics.consistency import discretised
    >>> a = torch.tensor([[0.0, 0.3, 1.0, 0.3]])
    >>> discretised(a, "top_n_sign", top_n=2), discretised(a, "rank"), discretised(a, "top_n_positions", top_n=2)
    (tensor([[0., 1.]]), tensor([[2, 3, 1, 0]]), tensor([[False,  True,  True, False]]))
    """
    check_choice(discretise, "discretise", DISCRETISATIONS)
    check_positive_int(top_n, "top_n")
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise ValueError(f"decimals must be an integer >= 0, got {decimals!r}")
    if discretise == "top_n_sign":
        return flat[:, :top_n].sign()
    if discretise == "sign":
        return flat.sign()
    if discretise == "floating_points":
        return flat.round(decimals=decimals)
    if discretise == "rank":  # numpy's argsort(a)[::-1], ties in a stable order: the later position first
        return flat.argsort(dim=1, stable=True).flip(1)
    order = (-flat).argsort(dim=1, stable=True)[:, :top_n]  # the largest first, ties by position
    return torch.zeros_like(flat, dtype=torch.bool).scatter_(1, order, True)


def consistency_scores(explanations: Tensor, predictions: Tensor) -> Scores:
    """Per sample (B,): the share of the other samples with an equal explanation (rows of ``explanations`` (B, K))
    that have an equal prediction (``predictions`` (B,)); undefined (NaN) where no other sample has its explanation.
    Samples are grouped by their rows (``torch.unique``): no B x B comparison.

    >>> import torch
    >>> from faithbench.metrics.consistency import consistency_scores
    >>> e = torch.tensor([[1.0], [1.0], [1.0], [0.0]])  # three samples share an explanation, one is alone
    >>> out = consistency_scores(e, torch.tensor([3, 3, 5, 3]))
    >>> out.values, out.undefined
    (tensor([0.5000, 0.5000, 0.0000,    nan], dtype=torch.float64), tensor([False, False, False,  True]))
    """
    if explanations.dim() != 2 or predictions.shape != (explanations.shape[0],):
        raise ValueError(
            f"explanations must be (B, K) and predictions (B,); got {tuple(explanations.shape)} and "
            f"{tuple(predictions.shape)}"
        )
    if explanations.shape[0] == 0:
        empty = torch.empty(0, dtype=torch.float64, device=explanations.device)
        return Scores(empty, empty.bool())
    _, group = torch.unique(explanations, dim=0, return_inverse=True)
    _, both = torch.unique(torch.stack([group, predictions.to(group.device).long()], dim=1), dim=0,
                           return_inverse=True)  # fmt: skip
    same_explanation = torch.bincount(group)[group] - 1  # the others with this explanation
    same_both = torch.bincount(both)[both] - 1  # ... and this prediction
    alone = same_explanation == 0
    values = same_both.double() / same_explanation.clamp(min=1).double()
    return Scores(values.where(~alone, torch.nan), alone)


def consistency(
    maps: Tensor,
    predictions: Tensor,
    *,
    discretise: str = "top_n_sign",
    top_n: int = 5,
    decimals: int = 2,
    normalise: bool = True,
    absolute: bool = True,
) -> Scores:
    """Consistency of maps (B, ...) with the model's ``predictions`` (B,) over the B samples (formula in the module
    docstring); the defaults are Quantus 0.6.0's (``top_n_sign`` of the first 5 entries, maps divided by their
    largest |entry| and made positive).

    >>> import torch
    >>> from faithbench.metrics.consistency import consistency
    >>> maps = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 3.0]])  # two pairs of explanations
    >>> consistency(maps, torch.tensor([0, 0, 1, 2]), discretise="sign").values
    tensor([1., 1., 0., 0.], dtype=torch.float64)
    """
    if maps.dim() < 2 or maps.shape[0] != predictions.shape[0]:
        raise ValueError(f"maps must be (B, ...) with one row per prediction; got {tuple(maps.shape)} and "
                         f"{tuple(predictions.shape)}")  # fmt: skip
    flat = prepared(maps, normalise=normalise, absolute=absolute)
    return consistency_scores(discretised(flat, discretise, top_n=top_n, decimals=decimals), predictions)


@dataclass(frozen=True)
class ConsistencyConfig:
    """``[consistency]``: the maps of ``target`` (the label, as Quantus, or the predicted class) divided by their
    largest |entry| (``normalise``) and made positive (``absolute``), discretised by ``discretise`` (``top_n``
    entries for ``top_n_sign`` and ``top_n_positions``, ``decimals`` for ``floating_points``), compared over the
    piece's samples."""

    discretise: str = "top_n_sign"
    top_n: int = 5
    decimals: int = 2
    normalise: bool = True
    absolute: bool = True
    target: str = "label"

    def __post_init__(self) -> None:
        check_choice(self.discretise, "discretise", DISCRETISATIONS)
        check_choice(self.target, "target", TARGETS)
        check_positive_int(self.top_n, "top_n")
        if isinstance(self.decimals, bool) or not isinstance(self.decimals, int) or self.decimals < 0:
            raise ValueError(f"decimals must be an integer >= 0, got {self.decimals!r}")
        for name in ("normalise", "absolute"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")


def evaluate_consistency(unit: Unit, cfg: ConsistencyConfig) -> MetricResult:
    """Per sample of this piece: the share of the piece's other samples with its explanation that share its
    prediction (the maps of the samples, the model's predictions once per model)."""
    _, _, ids = unit.samples()
    params = {**to_dict(cfg), "compared_within": "piece", "pieces": unit.world}
    explained = "samples" if cfg.target == "label" else f"samples:{cfg.target}"
    if len(ids) == 0:
        return MetricResult.empty(params, explained)
    scores = consistency(unit.sample_maps(cfg.target), unit.sample_targets("predicted"), discretise=cfg.discretise,
                         top_n=cfg.top_n, decimals=cfg.decimals, normalise=cfg.normalise,
                         absolute=cfg.absolute)  # fmt: skip
    return MetricResult(values=scores.values, undefined=scores.undefined, sample_ids=ids, params=params,
                        explained=explained)  # fmt: skip


def cost(unit: Unit, cfg: ConsistencyConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps of ``target`` and the samples' predictions (once per model)."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit, cfg.target), MetricCost(("predicted",), inputs=n, scope="model"))


CONSISTENCY = described("consistency", evaluate=evaluate_consistency, cost=cost, config=ConsistencyConfig)
