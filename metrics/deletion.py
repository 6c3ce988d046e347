"""Pixel deletion and insertion curves (ALOE App. A/B; insertion is the reverse companion).

The attribution map is cut into b x b blocks (b = 1: pixels); a block's score is the mean signed
attribution of its pixels (blocks cut by the bottom/right border average the pixels they hold).
Blocks are ranked, most important first (ties: earlier block in row-major order first). For each
fraction f, the top ``k = floor(f * n_blocks + 1/2)`` blocks are

* deletion:  set to the baseline (all channels of a pixel together, so both halves of a B-cos
  [x, 1-x] pair go at once), the rest kept;
* insertion: kept, everything else set to the baseline;

(``baseline = "per-image-mean"``, deletion only: Quantus' convention, each step's removed blocks set to the mean of
the image as it stands before that step, :func:`~faithbench.metrics.baselines.running_mean_baseline`)

and the explained class's probability p_f is recorded. Score = normalised area under the curve,

    AUC = trapezoid(p_f over f) / (f_max - f_min)       in [0, 1]

lower is better for deletion, higher for insertion. ALOE's fractions are the default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.activations import ACTIVATIONS
from faithbench.config import to_dict
from faithbench.metrics._checks import (
    block_size_for,
    check_choice,
    check_finite,
    check_fractions,
    check_positive_int,
    check_targets,
    check_tensor,
    resolve_block,
)
from faithbench.metrics._perturb import ForwardFn, feature_ranks, probabilities_after_removal, unranked
from faithbench.metrics.baselines import BASELINES, PER_IMAGE_MEAN, BaselineConfig, running_mean_baseline, unit_baseline
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores

ALOE_FRACTIONS: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8)


def block_scores(maps: Tensor, block_size: int) -> Tensor:
    """Mean attribution per b x b block: (B, H, W) -> (B, ceil(H/b), ceil(W/b))."""
    b = check_positive_int(block_size, "block_size")
    if b == 1:
        return maps
    h, w = maps.shape[-2:]
    pad = (0, (-w) % b, 0, (-h) % b)
    sums = F.avg_pool2d(F.pad(maps, pad).unsqueeze(1), b).squeeze(1)
    counts = F.avg_pool2d(F.pad(torch.ones_like(maps[:1]), pad).unsqueeze(1), b).squeeze(1)
    return sums / counts


def check_curve_inputs(
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    fractions: Sequence[float],
    activation: str,
    *,
    name: str = "inputs",
    allow_zero: bool = True,
    min_fractions: int = 2,
) -> tuple[Tensor, Tensor, Tensor]:
    """The checks of a removal curve's arguments: (channel-summed (B, H, W) maps, targets, fractions (at least
    ``min_fractions``; 0 among them if ``allow_zero``)); ``name``: what the inputs are called in the errors."""
    check_tensor(inputs, name, min_dim=4, floating=True)
    check_tensor(attributions, "attributions", min_dim=3, floating=True)
    check_choice(activation, "activation", ACTIVATIONS)
    if attributions.dim() == 4:
        attributions = attributions.sum(dim=1)
    b, _, h, w = inputs.shape
    if attributions.shape != (b, h, w):
        raise ValueError(
            f"attributions must be (B, H, W) or (B, C, H, W) matching {name} {tuple(inputs.shape)}, "
            f"got {tuple(attributions.shape)}"
        )
    check_finite(attributions, "attributions")
    frac = check_fractions(fractions, allow_zero=allow_zero)
    if frac.numel() < min_fractions:
        raise ValueError("the curve's area needs at least two fractions")
    return attributions, check_targets(targets, b), frac


def pixel_deletion(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    *,
    block_size: int | None = None,
    fractions: Sequence[float] = ALOE_FRACTIONS,
    baseline: float | Tensor | str = 0.0,
    activation: str = "softmax",
    chunk_size: int = 256,
) -> CurveScores:
    """Deletion curve and normalised AUC (lower is better). See the module docstring.

    Args:
        forward: ``forward(images) -> (n, K)`` logits (``activation`` maps them to probabilities).
        inputs: (B, C, H, W) in model-input space (C = 6 for B-cos encodings).
        attributions: (B, H, W), or (B, C, H, W) summed over channels.
        targets: (B,) explained classes.
        block_size: b (1 = single pixels); None: the image side / 14 (16 px on 224 px images, as ALOE; 2 px on
            28 px digits).
        fractions: increasing fractions of blocks in [0, 1] (at least two).
        baseline: replacement in model-input space: a scalar, a tensor broadcastable to (C, H, W), or
            one per sample (B, C, H, W); :func:`faithbench.metrics.baselines.removal_baseline` encodes an
            image-space baseline per model. ``"per-image-mean"``: Quantus' ``perturb_baseline="mean"``, each
            step's blocks set to the mean of the image after the step before
            (:func:`~faithbench.metrics.baselines.running_mean_baseline`).
        activation: ``softmax``, ``sigmoid`` (B-cos models) or ``identity``.
        chunk_size: perturbed images per model call.

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()  # logit 0 = sum(w * x) = 120 with w = 0..15 on a 4 x 4 image of ones
        >>> from faithbench.metrics import pixel_deletion
        >>> fractions = (0, 0.25, 0.5, 1)
        >>> out = pixel_deletion(*toy.args(), block_size=1, fractions=fractions, activation="identity")
        >>> out.curve  # the 4 and 8 largest w removed: 120 - (15 + 14 + 13 + 12), 120 - 92
        tensor([[120.,  66.,  28.,   0.]])
        >>> out.values  # trapezoid area over the fractions
        tensor([42.])
    """
    return _block_curve(
        forward,
        inputs,
        attributions,
        targets,
        block_size,
        fractions,
        baseline,
        activation,
        chunk_size,
        insert=False,
    )


def pixel_insertion(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    *,
    block_size: int | None = None,
    fractions: Sequence[float] = ALOE_FRACTIONS,
    baseline: float | Tensor = 0.0,
    activation: str = "softmax",
    chunk_size: int = 256,
) -> CurveScores:
    """Insertion curve and normalised AUC (higher is better): start from the baseline and reveal
    the top blocks. Arguments as :func:`pixel_deletion`.

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()  # logit 0 = sum(w * x) = 120 with w = 0..15 on a 4 x 4 image of ones
        >>> from faithbench.metrics import pixel_insertion
        >>> fractions = (0, 0.25, 0.5, 1)
        >>> out = pixel_insertion(*toy.args(), block_size=1, fractions=fractions, activation="identity")
        >>> out.curve, out.values
        (tensor([[  0.,  54.,  92., 120.]]), tensor([78.]))
    """
    return _block_curve(
        forward,
        inputs,
        attributions,
        targets,
        block_size,
        fractions,
        baseline,
        activation,
        chunk_size,
        insert=True,
    )


def _block_curve(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    block_size: int | None,
    fractions: Sequence[float],
    baseline: float | Tensor | str,
    activation: str,
    chunk_size: int,
    *,
    insert: bool,
) -> CurveScores:
    if isinstance(baseline, str) and (insert or baseline != PER_IMAGE_MEAN):
        raise ValueError(insertion_refusal(baseline) if insert else f"baseline {baseline!r}: not {PER_IMAGE_MEAN!r}")
    attributions, targets, frac = check_curve_inputs(inputs, attributions, targets, fractions, activation)
    b, _, h, w = inputs.shape
    block_size = block_size_for(h, w, block_size)
    blocks = block_scores(attributions.float(), block_size)
    nbh, nbw = blocks.shape[-2:]
    n_blocks = nbh * nbw
    block_rank = feature_ranks(blocks.reshape(b, -1)).reshape(b, nbh, nbw)
    s = block_size
    pixel_rank = block_rank.repeat_interleave(s, dim=1).repeat_interleave(s, dim=2)[:, :h, :w]
    k = torch.floor(frac * n_blocks + 0.5).long().to(inputs.device)
    r = k.numel()
    if isinstance(baseline, str):
        baseline = running_mean_baseline(inputs, pixel_rank, k)
    curve = probabilities_after_removal(
        forward,
        inputs,
        pixel_rank,
        targets,
        job_sample=torch.arange(b, device=inputs.device).repeat_interleave(r),
        job_k=k.repeat(b),
        job_keep_top=torch.full((b * r,), insert, dtype=torch.bool, device=inputs.device),
        baseline=baseline,
        activation=activation,
        chunk_size=chunk_size,
    ).reshape(b, r)
    xs = frac.to(device=inputs.device, dtype=curve.dtype)
    auc = torch.trapezoid(curve, xs, dim=1) / (xs[-1] - xs[0])
    return CurveScores(
        values=auc,
        undefined=unranked(attributions),
        curve=curve,
        fractions=xs,
    )


# --------------------------------------------------------------------------- the suite's metrics


@dataclass(frozen=True)
class DeletionConfig(BaselineConfig):
    """``[deletion]``, shared by ``pixel_deletion`` and ``pixel_insertion``. ``block_size`` left out: the data's
    image side / 14 (:func:`faithbench.metrics._checks.block_size_for`), set by :meth:`for_image`."""

    block_size: int | None = None
    fractions: tuple[float, ...] = ALOE_FRACTIONS

    protocols: ClassVar[dict[str, tuple]] = {"baseline": ("mean", "blur", "value", "model-input-zero")}
    cli: ClassVar[dict[str, str]] = {}
    baselines: ClassVar[tuple[str, ...]] = (*BASELINES, PER_IMAGE_MEAN)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.block_size is not None:
            check_positive_int(self.block_size, "block_size")
        if len(check_fractions(self.fractions, allow_zero=True)) < 2:
            raise ValueError("fractions: the curve's area needs at least two fractions")

    def for_image(self, side: int) -> DeletionConfig:
        """The config on ``side`` px images: the default block size filled in, one that degenerates refused."""
        return resolve_block(self, side)


def insertion_refusal(baseline: str) -> str:
    """Why insertion does not take ``baseline`` (``per-image-mean`` is a removal sequence's own mean)."""
    return (
        f"pixel_insertion: baseline {baseline!r} is Quantus' deletion convention (the mean of the image after "
        "each removal); insertion removes no sequence. Valid for insertion: mean, value, blur, model-input-zero"
    )


def _insertion_refuses(cfg: DeletionConfig) -> str | None:
    return insertion_refusal(cfg.baseline) if cfg.baseline == PER_IMAGE_MEAN else None


def _curve_metric(curve_fn: Callable[..., CurveScores]) -> Callable[[Unit, DeletionConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: DeletionConfig) -> MetricResult:
        x, t, ids = unit.samples()
        if len(ids) == 0:
            return MetricResult.empty(to_dict(cfg), "samples")
        res = curve_fn(
            unit.forward,
            x,
            unit.sample_maps(),
            t,
            block_size=cfg.block_size,
            fractions=cfg.fractions,
            baseline=unit_baseline(unit, cfg, ids),
            activation=unit.model.activation,
            chunk_size=unit.eval_batch,
        )
        return MetricResult.from_curve(res, sample_ids=ids, params=to_dict(cfg))

    return evaluate


def _curve_cost(name: str) -> Callable[[Unit, DeletionConfig], tuple[MetricCost, ...]]:
    def cost(unit: Unit, cfg: DeletionConfig) -> tuple[MetricCost, ...]:
        """The per-sample maps and one model input per sample and fraction."""
        n = len(unit.take(len(unit.sample_ids)))
        return (*sample_maps_cost(unit), MetricCost((name, cfg), inputs=n * len(cfg.fractions)))

    return cost


DELETION = described(
    "pixel_deletion",
    evaluate=_curve_metric(pixel_deletion),
    cost=_curve_cost("deletion"),
    config=DeletionConfig,
)
INSERTION = described(
    "pixel_insertion",
    evaluate=_curve_metric(pixel_insertion),
    cost=_curve_cost("insertion"),
    config=DeletionConfig,
    refuses=_insertion_refuses,
)
