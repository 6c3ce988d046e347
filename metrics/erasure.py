"""Comprehensiveness and sufficiency (ERASER, DeYoung et al. 2020; B-cos LM Sec. 5).

With p(.) the probability of the explained class and r_k the top-k features by attribution:

    comp_k = p(x) - p(x with r_k removed)          (higher is better: the rationale mattered)
    suff_k = p(x) - p(x with all but r_k removed)  (lower is better: the rationale suffices)

"Removed" means replaced by the mask token (token ids) or by a baseline (images: defined in image
space and encoded per model, :mod:`faithbench.metrics.baselines`; all channels of a pixel together, so both
halves of a B-cos [x, 1-x] pair go at once). k = max(min_k, floor(n * r)) for each fraction r,
n = number of features of the sample (``feature_mask`` excludes special and padding tokens).
Two summaries:

* ``eraser``:  AOPC = mean of the curve over r in {0.01, 0.05, 0.1, 0.2, 0.5};
* ``bcos-lm``: trapezoid area of the curve over r in {0.1, ..., 0.9}, not normalised (what the
  B-cos LM code computes with ``sklearn.metrics.auc``); sufficiency also masks the non-feature
  positions ([CLS]/[SEP]).

The explained class is the model's prediction by default (ERASER and the B-cos LM code explain
the predicted class); ``target = "label"`` explains the true label instead. p is the softmax over
the classes for every model, B-cos models included, as the B-cos LM code computes it
(``probability = "softmax"``); ``probability = "model"`` uses the model's own activation instead
(sigmoid per class for the BCE-trained B-cos models).

Scores are probabilities differences in [-1, 1]; papers report them x100.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from faithbench.activations import ACTIVATIONS
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_finite, check_fractions, check_targets, check_tensor
from faithbench.metrics._perturb import ForwardFn, feature_ranks, probabilities_after_removal, unranked
from faithbench.metrics.baselines import BaselineConfig, unit_baseline
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores, ErasureScores
from faithbench.registry import Registry


@dataclass(frozen=True)
class ErasureSummary:
    """Conventions of one comprehensiveness/sufficiency summary (see module docstring)."""

    name: str
    fractions: tuple[float, ...]
    aggregate: str  # "mean" (AOPC) or "trapezoid" (area over the fractions, unnormalised)
    mask_special_in_sufficiency: bool
    description: str


ERASURE_SUMMARIES: Registry[ErasureSummary] = Registry(
    "comprehensiveness/sufficiency summary", "comprehensiveness/sufficiency summaries"
)
for _summary in (
    ErasureSummary(
        "eraser",
        (0.01, 0.05, 0.1, 0.2, 0.5),
        "mean",
        False,
        "ERASER AOPC: mean over k in {1, 5, 10, 20, 50} % of the features",
    ),
    ErasureSummary(
        "bcos-lm",
        (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
        "trapezoid",
        True,
        "B-cos LM code: trapezoid area over r = 0.1..0.9 (unnormalised); sufficiency masks [CLS]/[SEP] too",
    ),
):
    ERASURE_SUMMARIES.register(_summary.name, _summary)


def comprehensiveness_sufficiency(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor | None = None,
    *,
    summary: str = "eraser",
    fractions: Sequence[float] | None = None,
    top_k: Sequence[int] | None = None,
    min_k: int = 1,
    baseline: float | int | Tensor = 0.0,
    feature_mask: Tensor | None = None,
    mask_special_in_sufficiency: bool | None = None,
    activation: str = "softmax",
    chunk_size: int = 256,
    extra: Mapping[str, Tensor] | None = None,
) -> ErasureScores:
    """Comprehensiveness and sufficiency curves and summaries for a batch of explanations.

    Args:
        forward: ``forward(inputs, **extra) -> (n, K)`` logits (or probabilities with
            ``activation="identity"``).
        inputs: (B, T) token ids, or (B, C, H, W) images (any (B, *C, *S) with features on S).
        attributions: (B, *S) feature scores, ranked by signed value (highest first).
        targets: (B,) explained classes; ``None`` = the model's predicted class (B-cos LM).
        summary: ``eraser`` or ``bcos-lm`` (see module docstring); sets the defaults of
            ``fractions`` and ``mask_special_in_sufficiency``.
        fractions: feature fractions r in (0, 1]; overrides the summary's.
        top_k: absolute k values instead of fractions (each must be <= every sample's n); only with the
            ``eraser`` (mean) summary: an area needs the fractions as its x-axis.
        min_k: lower bound of k from a fraction (1: at least one feature is always removed).
        baseline: the mask token id (text) or the replacement value / tensor (images).
        feature_mask: (B, *S) bool, True for rankable features (default: all).
        mask_special_in_sufficiency: whether sufficiency also replaces non-feature positions.
        activation: ``softmax``, ``sigmoid`` (B-cos models) or ``identity``.
        chunk_size: perturbed inputs per model call.
        extra: per-sample side inputs for ``forward`` (e.g. ``{"attention_mask": mask}``).

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()  # logit 0 = sum(w * x) = 120 with w = 0..15 on a 4 x 4 image of ones
        >>> from faithbench.metrics import comprehensiveness_sufficiency
        >>> out = comprehensiveness_sufficiency(*toy.args(), fractions=(0.25, 0.5), activation="identity")
        >>> out.comprehensiveness.curve, out.comprehensiveness.values  # 120 - 66, 120 - 28; their mean
        (tensor([[54., 92.]]), tensor([73.]))
        >>> out.sufficiency.curve, out.sufficiency.values  # 120 - 54 (the top 4 kept), 120 - 92
        (tensor([[66., 28.]]), tensor([47.]))
    """
    check_tensor(inputs, "inputs")
    check_tensor(attributions, "attributions", floating=True)
    check_finite(attributions, "attributions")
    conv = ERASURE_SUMMARIES.get(summary)
    check_choice(activation, "activation", ACTIVATIONS)
    b = inputs.shape[0]
    feat_shape = attributions.shape[1:]
    if attributions.shape[0] != b or inputs.shape[inputs.dim() - len(feat_shape) :] != feat_shape:
        raise ValueError(
            f"attributions {tuple(attributions.shape)} must be (batch, *feature dims) matching the "
            f"trailing dims of inputs {tuple(inputs.shape)}"
        )
    if feature_mask is None:
        feature_mask = torch.ones(attributions.shape, dtype=torch.bool, device=inputs.device)
    elif feature_mask.shape != attributions.shape or feature_mask.dtype != torch.bool:
        raise ValueError(f"feature_mask must be a bool tensor of shape {tuple(attributions.shape)}")
    flat_valid = feature_mask.reshape(b, -1)
    n_features = flat_valid.sum(dim=1)
    if bool((n_features == 0).any()):
        empty = (n_features == 0).nonzero().flatten().tolist()
        raise ValueError(f"feature_mask selects no feature in samples {empty}")

    if targets is None:
        with torch.no_grad():
            targets = forward(inputs, **dict(extra or {})).argmax(dim=1)
    targets = check_targets(targets, b)

    if top_k is not None:
        if fractions is not None:
            raise ValueError("give either fractions or top_k, not both")
        ks = torch.as_tensor(list(top_k), dtype=torch.long, device=inputs.device)
        if ks.dim() != 1 or ks.numel() == 0 or bool((ks < 0).any()):
            raise ValueError(f"top_k must be a non-empty sequence of non-negative ints, got {list(top_k)}")
        too_big = ks.max() > n_features
        if bool(too_big.any()):
            raise ValueError(
                f"top_k={int(ks.max())} is larger than the number of features of samples "
                f"{too_big.nonzero().flatten().tolist()} (n = {n_features[too_big].tolist()})"
            )
        if conv.aggregate == "trapezoid":
            raise ValueError(
                f"the {summary!r} summary is an area over the fractions r = k / n; with absolute top_k values "
                "use summary='eraser' (the mean over k), or give fractions instead of top_k"
            )
        k = ks.expand(b, -1)
        xs = ks.double()
    else:
        frac = check_fractions(conv.fractions if fractions is None else fractions, allow_zero=False)
        xs = frac
        k = torch.floor(n_features.double().unsqueeze(1) * frac.to(inputs.device)).long()
        k = k.clamp(min=min_k).minimum(n_features.unsqueeze(1))

    if conv.aggregate == "trapezoid" and k.shape[1] < 2:
        raise ValueError(f"the {summary!r} summary is an area and needs at least 2 fractions or k values")

    ranks = feature_ranks(attributions.reshape(b, -1).float(), flat_valid).reshape(attributions.shape)
    r = k.shape[1]
    # Jobs: the original input (k = 0, remove nothing), r comprehensiveness, r sufficiency.
    sample = torch.arange(b, device=inputs.device).repeat_interleave(1 + 2 * r)
    job_k = torch.cat([torch.zeros(b, 1, dtype=torch.long, device=inputs.device), k, k], dim=1).reshape(-1)
    keep = torch.zeros(b, 1 + 2 * r, dtype=torch.bool, device=inputs.device)
    keep[:, 1 + r :] = True
    mask_special = (
        conv.mask_special_in_sufficiency if mask_special_in_sufficiency is None else mask_special_in_sufficiency
    )
    probs = probabilities_after_removal(
        forward,
        inputs,
        ranks,
        targets,
        job_sample=sample,
        job_k=job_k,
        job_keep_top=keep.reshape(-1),
        baseline=baseline,
        activation=activation,
        chunk_size=chunk_size,
        protected=None if mask_special else ~feature_mask,
        extra=extra,
    ).reshape(b, 1 + 2 * r)
    p0 = probs[:, :1]
    comp_curve, suff_curve = p0 - probs[:, 1 : 1 + r], p0 - probs[:, 1 + r :]
    xs = xs.to(device=inputs.device, dtype=comp_curve.dtype)
    no_ranking = unranked(attributions, feature_mask)

    def summarise(curve: Tensor) -> CurveScores:
        if conv.aggregate == "mean":
            value = curve.mean(dim=1)
        else:
            value = torch.trapezoid(curve, xs, dim=1)
        return CurveScores(values=value, undefined=no_ranking, curve=curve, fractions=xs)

    return ErasureScores(
        comprehensiveness=summarise(comp_curve),
        sufficiency=summarise(suff_curve),
        original_probability=p0.squeeze(1),
    )


# --------------------------------------------------------------------------- the suite's metrics


TARGETS = ("predicted", "label")
# p(.) of comp/suff: softmax over the classes for every model (the B-cos LM code, B-cos models included), or the
# model's own activation (``model``: sigmoid per class for B-cos models trained with BCE).
PROBABILITIES = ("softmax", "model")


@dataclass(frozen=True)
class ErasureConfig(BaselineConfig):
    """``[erasure]``, shared by ``comprehensiveness`` and ``sufficiency`` (computed once for both)."""

    summary: str = "eraser"
    target: str = "predicted"  # the explained class: the model's prediction (ERASER, B-cos LM) or the label
    probability: str = "softmax"  # p(.): softmax for every model (B-cos LM code) or ``model`` (its own activation)

    protocols: ClassVar[dict[str, tuple]] = {"summary": ("eraser", "bcos-lm")}  # rescore --sweep
    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        super().__post_init__()
        ERASURE_SUMMARIES.get(self.summary)
        check_choice(self.target, "target", TARGETS)
        check_choice(self.probability, "probability", PROBABILITIES)


def _part(name: str) -> Callable[[Unit, ErasureConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: ErasureConfig) -> MetricResult:
        x, t, ids = unit.samples()
        if len(ids) == 0:
            return MetricResult.empty(to_dict(cfg), "samples")
        targets = unit.sample_targets(cfg.target)
        both = unit.memo(
            ("erasure", cfg),
            lambda: comprehensiveness_sufficiency(
                unit.forward,
                x,
                unit.sample_maps(cfg.target),
                targets,
                summary=cfg.summary,
                baseline=unit_baseline(unit, cfg, ids),
                feature_mask=unit.sample_feature_mask(),
                activation="softmax" if cfg.probability == "softmax" else unit.model.activation,
                chunk_size=unit.eval_batch,
            ),
        )
        part: CurveScores = getattr(both, name)
        explained = "samples" if cfg.target == "label" else f"samples:{cfg.target}"
        return MetricResult(
            values=part.values,
            undefined=part.undefined,
            sample_ids=ids,
            params=to_dict(cfg),
            explained=explained,
            curve=part.curve,
            fractions=part.fractions,
        )

    return evaluate


def cost(unit: Unit, cfg: ErasureConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps of the explained classes, then per sample the original input and each k removed and kept,
    computed once for comprehensiveness and sufficiency."""
    n, r = len(unit.take(len(unit.sample_ids))), len(ERASURE_SUMMARIES.get(cfg.summary).fractions)
    return (*sample_maps_cost(unit, cfg.target), MetricCost(("erasure", cfg), inputs=n * (1 + 2 * r)))


# Both read one computation: its cost, config and conventions are one.
_SHARED = dict(cost=cost, config=ErasureConfig, conventions=ERASURE_SUMMARIES)
COMPREHENSIVENESS = described("comprehensiveness", evaluate=_part("comprehensiveness"), **_SHARED)
SUFFICIENCY = described("sufficiency", evaluate=_part("sufficiency"), **_SHARED)
