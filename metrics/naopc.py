"""Normalised AOPC (NAOPC; Edin et al., "Normalized AOPC: Fixing Misleading Faithfulness Metrics for Feature
Attribution Explainability", ACL 2025): comprehensiveness and sufficiency rescaled by each model's own bounds.

With p(.) the probability of the explained class t, n the features of a sample (text: its tokens, not [CLS], [SEP] or
padding; images: the cells of a ``grid`` x ``grid`` grid, as the single-deletion score's, a map ranking them by its
cell sums), and an order pi of them, features are removed one at a time (replaced by the baseline: the mask token,
the images' mean colour):

    AOPC(pi) = 1/n * sum_{k=1..n} [ p(x) - p(x without pi_1..pi_k) ]

comprehensiveness removes the most important first (pi by attribution, descending), sufficiency the least important
first (ascending: what is kept is the top n - k). Both live between the same bounds of the model on x,

    U = max_pi AOPC(pi),  L = min_pi AOPC(pi),   NAOPC = (AOPC - L) / (U - L)

(1: the order no other order beats; 0: the worst one). ``naopc_comprehensiveness`` is higher-better,
``naopc_sufficiency`` lower-better, both in [0, 1] where the bounds are exact, reported x100. U and L are a property
of the model and input, not of the method: found once per model and sample, exactly (every subset's p, then the best
path through the subset lattice: ``best(S) = drop(S) + max_{j in S} best(S - j)``) where n <= ``exact_max``, else by
the authors' beam search (each step extends every kept order by each remaining feature and keeps the ``beam_size``
best cumulative sums; a lower bound of U and an upper bound of L, so a method's order can reach slightly past 1 or 0).
Undefined (NaN, counted) where U = L: the model's output does not depend on the order (the authors report 0).

Unlike raw comprehensiveness, NAOPC compares models: a model whose p hardly moves when tokens are masked has a
narrow [L, U] and a small raw AOPC for every method, however faithful its explanations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from faithbench.metrics._perturb import feature_ranks, unranked
from faithbench.metrics.aopc_bounds import AopcBounds, Removal, aopc_bounds
from faithbench.metrics.baselines import BaselineConfig, unit_baseline
from faithbench.metrics.single_deletion import cell_index
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

ForwardFn = Callable[[Tensor], Tensor]


def aopc_orders(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    feature_mask: Tensor,
    *,
    baseline: float | int | Tensor,
    activation: str = "softmax",
    chunk_size: int = 256,
    features: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(B,) AOPC of the attribution order, descending (comprehensiveness) and ascending (sufficiency), one feature
    removed per step (ties broken by position, as :func:`~faithbench.metrics._perturb.feature_ranks`). ``attributions``
    and ``feature_mask`` are (B, F) per feature; for images (B, C, H, W), ``features`` (H, W) names each pixel's
    feature (its cell) and ``attributions`` are the cells' sums.

    Example:
        >>> from faithbench.metrics.toy import additive_text_model
        >>> from faithbench.metrics.naopc import aopc_orders
        >>> toy = additive_text_model()  # logit 0 = the sum of the kept tokens' weights 3, 1, 0, 2
        >>> comp, suff = aopc_orders(*toy.args(), toy.feature_mask, baseline=0.0, activation="identity")
        >>> comp, suff  # the map's own order, most important first, then least important first
        (tensor([5.], dtype=torch.float64), tensor([2.5000], dtype=torch.float64))
    """
    check_tensor(attributions, "attributions", floating=True)
    check_finite(attributions, "attributions")
    b, t = feature_mask.shape
    p = Removal(forward, inputs, targets.to(inputs.device), baseline, activation, chunk_size, features)
    everyone = torch.arange(b, device=inputs.device)
    n = feature_mask.sum(dim=1)
    steps = torch.arange(t, device=inputs.device)
    job = (steps.view(1, -1) < n.view(-1, 1)).nonzero()  # (J, 2): sample, k - 1
    removed = [torch.zeros_like(feature_mask)]  # the originals, then each order's first k (one run of model calls)
    for scores in (attributions, -attributions):
        ranks = feature_ranks(scores.reshape(b, t).float(), feature_mask)  # 0 = removed first; non-features: n..
        removed.append(ranks[job[:, 0]] <= job[:, 1:2])
    probs = p(torch.cat([everyone, job[:, 0], job[:, 0]]), torch.cat(removed))
    p0, orders = probs[:b], probs[b:].view(2, len(job))
    out = []
    for after in orders:
        drop = torch.zeros(b, t, dtype=torch.float64, device=inputs.device)
        drop[job[:, 0], job[:, 1]] = p0[job[:, 0]] - after
        out.append(drop.sum(dim=1) / n.double())
    return out[0], out[1]


def normalised_aopc(aopc: Tensor, bounds: AopcBounds, attributions: Tensor, feature_mask: Tensor) -> Scores:
    """(AOPC - L) / (U - L) per sample; undefined where U = L or the map ranks nothing (constant on the features).

    Example:
        >>> import torch
        >>> from faithbench.metrics.aopc_bounds import AopcBounds
        >>> from faithbench.metrics.naopc import normalised_aopc
        >>> lower, upper = torch.tensor([2.5, 1.0]), torch.tensor([5.0, 1.0])
        >>> bounds = AopcBounds(lower=lower, upper=upper, exact=torch.tensor([True, True]))
        >>> maps, mask = torch.tensor([[3.0, 1.0, 0.0, 2.0]] * 2), torch.ones(2, 4, dtype=torch.bool)
        >>> out = normalised_aopc(torch.tensor([4.0, 1.0]), bounds, maps, mask)
        >>> out.values, out.undefined  # (4 - 2.5) / (5 - 2.5); equal bounds leave it undefined
        (tensor([0.6000,    nan], dtype=torch.float64), tensor([False,  True]))
    """
    width = bounds.upper - bounds.lower
    undefined = (width <= 0) | unranked(attributions, feature_mask).to(width.device)
    values = torch.where(undefined, torch.nan, (aopc.double() - bounds.lower) / width.clamp(min=1e-300))
    return Scores(values=values, undefined=undefined)


# --------------------------------------------------------------------------- the suite's metrics


@dataclass(frozen=True)
class NaopcConfig(BaselineConfig):
    """``[naopc]``, shared by ``naopc_comprehensiveness`` and ``naopc_sufficiency`` (the bounds are found once per
    model and sample, for every method). ``max_samples`` bounds the cost: the first that many of the suite's samples
    (0: all); the beam search costs about ``beam_size * n^2`` model inputs per sample of n features. ``grid``: an
    image's features are its ``grid`` x ``grid`` cells (3: 9 cells, solved exactly; text ignores it); an image suite
    sets ``baseline`` to an image baseline (``mean``)."""

    baseline: str = "mask-token"
    target: str = "predicted"  # the explained class, as [erasure]: the model's prediction (ERASER, B-cos LM) or label
    beam_size: int = 5
    exact_max: int = 10
    max_samples: int = 0
    grid: int = 3

    protocols: ClassVar[dict[str, tuple]] = {}
    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.target, "target", ("predicted", "label"))
        check_positive_int(self.beam_size, "beam_size")
        check_positive_int(self.grid, "grid")
        if self.exact_max < 0 or self.exact_max > 16 or self.max_samples < 0:
            raise ValueError(
                f"exact_max must be in 0..16 (2^n inputs per sample) and max_samples >= 0, "
                f"got {self.exact_max} and {self.max_samples}"
            )


def _subset(unit: Unit, cfg: NaopcConfig) -> Tensor:
    """This shard's positions among its samples that are within the suite's first ``max_samples``."""
    return unit.first_samples(cfg.max_samples)


def _features(unit: Unit, cfg: NaopcConfig) -> tuple[Tensor, Tensor | None]:
    """The samples' (S, F) feature mask and, for images, (H, W) each pixel's cell (the features removed together)."""
    mask = unit.sample_feature_mask()
    if mask is not None:
        return mask, None
    x, _, _ = unit.samples()
    cells = cell_index(x.shape[-2], x.shape[-1], cfg.grid, x.device)
    return torch.ones(len(x), cfg.grid**2, dtype=torch.bool, device=x.device), cells


def _bounds(unit: Unit, cfg: NaopcConfig) -> AopcBounds:
    def compute() -> AopcBounds:
        x, _, ids = unit.samples()
        keep = _subset(unit, cfg).to(x.device)
        mask, cells = _features(unit, cfg)
        return aopc_bounds(
            unit.model.module,
            x[keep],
            unit.sample_targets(cfg.target)[keep],
            mask[keep],
            baseline=unit_baseline(unit, cfg, ids[keep.cpu()]),
            beam_size=cfg.beam_size,
            exact_max=cfg.exact_max,
            chunk_size=unit.eval_batch,
            features=cells,
        )

    key = ("naopc_bounds", cfg.baseline, cfg.target, cfg.beam_size, cfg.exact_max, cfg.max_samples, cfg.grid)
    return unit.per_model(key, compute)


def _evaluate(part: int) -> Callable[[Unit, NaopcConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: NaopcConfig) -> MetricResult:
        x, _, ids = unit.samples()
        keep = _subset(unit, cfg)
        params = {**to_dict(cfg), "order": ("descending", "ascending")[part]}
        if not bool(keep.any()):
            return MetricResult.empty(params, "samples")
        mask, cells = _features(unit, cfg)
        maps, mask = unit.sample_maps(cfg.target)[keep.to(x.device)], mask[keep.to(x.device)]
        if cells is not None:  # an image map ranks the cells by its sums over them
            maps = torch.zeros_like(mask, dtype=maps.dtype).index_add_(1, cells.flatten(), maps.flatten(1))
        orders = unit.memo(
            ("naopc", cfg),
            lambda: aopc_orders(
                unit.forward,
                x[keep.to(x.device)],
                maps,
                unit.sample_targets(cfg.target)[keep.to(x.device)],
                mask,
                baseline=unit_baseline(unit, cfg, ids[keep]),
                chunk_size=unit.eval_batch,
                features=cells,
            ),
        )
        scores = normalised_aopc(orders[part], _bounds(unit, cfg), maps, mask)
        explained = "samples" if cfg.target == "label" else f"samples:{cfg.target}"
        return MetricResult(
            values=scores.values, undefined=scores.undefined, sample_ids=ids[keep], params=params, explained=explained
        )

    return evaluate


def cost(unit: Unit, cfg: NaopcConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps; per sample its n removals in each order; once per model and sample, the bounds: 2^n
    inputs exactly, at most beam_size * n * (n + 1) by the two beam searches. Images: n = grid^2 cells. Text: n is
    counted at the longest input (every position but [CLS] a token), an upper bound."""
    m = int(_subset(unit, cfg).sum())
    text = unit.model.modality == "text"
    n = max(int(unit.model.input_size[-1]) - 1, 1) if text else cfg.grid**2
    bounds = 2**n if n <= cfg.exact_max else cfg.beam_size * n * (n + 1)
    note = "text: counted at the longest input (every position a token)" if text else ""
    return (
        *sample_maps_cost(unit, cfg.target),
        MetricCost(("naopc", cfg), inputs=m * (1 + 2 * n), note=note),
        MetricCost(("naopc_bounds", cfg), inputs=m * (1 + bounds), scope="model", note=note),
    )


COMPREHENSIVENESS = described("naopc_comprehensiveness", evaluate=_evaluate(0), cost=cost, config=NaopcConfig)
SUFFICIENCY = described("naopc_sufficiency", evaluate=_evaluate(1), cost=cost, config=NaopcConfig)
