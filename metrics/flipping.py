"""Pixel flipping in both directions, MoRF and LeRF, and their symmetric relevance gain (SRG).

Blücher, Vielhaben & Strodthoff, "Decoupling Pixel Flipping and Occlusion Strategy for Consistent XAI
Benchmarks" (TMLR 2024); the same protocol is AttnLRP's Table 1 and M4 / InterpretDL's ABPC. The map is
cut into b x b blocks (block score = mean attribution, :func:`faithbench.metrics.deletion.block_scores`,
computed so that equal blocks tie exactly).
With k_f = floor(f * n_blocks + 1/2) for each fraction f:

* MoRF (most relevant first): the k_f highest-scoring blocks are removed, p^MoRF_f read out;
* LeRF (least relevant first): the k_f lowest-scoring blocks are removed, p^LeRF_f read out.

Ties are broken by position, earlier block first, in *both* orders (LeRF ranks the negated map), so
LeRF(a) = MoRF(-a) exactly and a uniform map removes the same blocks in both orders (SRG = 0).
"Removed" means replaced by the fill (``fill``; all channels of a pixel together), in image space and
encoded per model (:mod:`faithbench.metrics.baselines`): ``mean``, ``value``, ``blur``,
``model-input-zero`` as for deletion, ``noise`` (uniform U(0, 1) noise per pixel and channel, a fixed field
per sample and ``seed``) or ``road`` (ROAD's noisy linear imputation, :mod:`faithbench.metrics.imputation`).
p is the explained class's probability (``readout = "probability"``: the model's activation) or its
logit (``readout = "logit"``: AttnLRP). With the normalised areas

    A^MoRF = trapezoid(p^MoRF_f over f) / (f_max - f_min),   A^LeRF likewise,

    SRG = A^LeRF - A^MoRF          (= normalised area of the curve p^LeRF_f - p^MoRF_f)

``morf`` is lower-better, ``lerf`` and ``srg`` higher-better (a faithful map's least relevant blocks
matter least, its most relevant ones most). Probabilities give areas in [0, 1] and SRG in [-1, 1].
Unlike Blücher et al. (SLIC superpixels, 15 log-spaced steps) the features are square blocks and the
default steps are f = 0, 0.1, ..., 1 (so both curves start at p(x) and meet at the fully filled image).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import (
    block_size_for,
    check_choice,
    check_fractions,
    check_positive_int,
    resolve_block,
)
from faithbench.metrics._perturb import ForwardFn, feature_ranks, probabilities_after_removal, unranked
from faithbench.metrics.baselines import removal_baseline
from faithbench.metrics.deletion import block_scores, check_curve_inputs
from faithbench.metrics.imputation import (
    ROAD_NOISE,
    STREAM_NOISE_FILL,
    FillFn,
    hashed_uniform,
    road_fill,
)
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores

FILLS = ("mean", "value", "blur", "model-input-zero", "noise", "road")
READOUTS = ("probability", "logit")
FLIPPING_FRACTIONS: tuple[float, ...] = tuple(i / 10 for i in range(11))


@dataclass(frozen=True)
class FlippingScores:
    """MoRF and LeRF curves and areas of the same explanations, and SRG = A^LeRF - A^MoRF (curve: LeRF - MoRF)."""

    morf: CurveScores
    lerf: CurveScores
    srg: CurveScores


def pixel_flipping(
    forward: ForwardFn,
    inputs: Tensor,
    attributions: Tensor,
    targets: Tensor,
    *,
    block_size: int | None = None,
    fractions: Sequence[float] = FLIPPING_FRACTIONS,
    baseline: float | Tensor = 0.0,
    fill: FillFn | None = None,
    activation: str = "softmax",
    chunk_size: int = 256,
) -> FlippingScores:
    """MoRF, LeRF and SRG of a batch of explanations (the conventions: the module docstring).

    With p_f the explained class's probability (or logit) after removing the k_f = floor(f n_blocks + 1/2) highest-
    (MoRF) or lowest-scoring (LeRF) blocks, A = trapezoid(p_f over f) / (f_max - f_min) for each order, and

        SRG = A^LeRF - A^MoRF.

    Args:
        forward: ``forward(images) -> (n, K)`` logits (``activation`` maps them to probabilities;
            ``identity`` reads the logits themselves).
        inputs: (B, C, H, W) in model-input space (C = 6 for B-cos encodings).
        attributions: (B, H, W), or (B, C, H, W) summed over channels.
        targets: (B,) explained classes.
        block_size: b (1 = single pixels); None: the image side / 14, as :func:`pixel_deletion`.
        fractions: increasing fractions of blocks in [0, 1] (at least two).
        baseline: replacement in model-input space (a scalar, a tensor broadcastable to (C, H, W), or one per
            sample (B, C, H, W)), as for :func:`faithbench.metrics.deletion.pixel_deletion`.
        fill: a replacement computed from each removal pattern instead of ``baseline``
            (:func:`faithbench.metrics.imputation.road_fill`).
        activation: ``softmax``, ``sigmoid`` (B-cos models) or ``identity``.
        chunk_size: perturbed images per model call.

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()  # logit 0 = sum(w * x) = 120 with w = 0..15 on a 4 x 4 image of ones
        >>> from faithbench.metrics.flipping import pixel_flipping
        >>> out = pixel_flipping(*toy.args(), block_size=2, fractions=(0, 0.5, 1), activation="identity")
        >>> out.morf.curve, out.lerf.curve  # 2 x 2 blocks of sums 50, 42, 18, 10: most / least relevant first
        (tensor([[120.,  28.,   0.]]), tensor([[120.,  92.,   0.]]))
        >>> out.morf.values, out.lerf.values, out.srg.values  # SRG = LeRF area - MoRF area
        (tensor([44.]), tensor([76.]), tensor([32.]))
    """
    attributions, targets, frac = check_curve_inputs(inputs, attributions, targets, fractions, activation)
    b, _, h, w = inputs.shape
    block_size = block_size_for(h, w, block_size)
    blocks = _tie_exact_block_scores(attributions.float(), block_size)
    undefined = unranked(attributions)
    nbh, nbw = blocks.shape[-2:]
    k = torch.floor(frac * nbh * nbw + 0.5).long().to(inputs.device)
    r = k.numel()
    xs = frac.to(device=inputs.device, dtype=torch.float32)

    def pixel_ranks(scores: Tensor) -> Tensor:
        block_rank = feature_ranks(scores.reshape(b, -1)).reshape(b, nbh, nbw)
        s = block_size
        return block_rank.repeat_interleave(s, dim=1).repeat_interleave(s, dim=2)[:, :h, :w]

    # MoRF and LeRF in one run of jobs (one set of model calls): samples 0..b-1 in MoRF order, b..2b-1 in LeRF's
    base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device)
    per_sample = base.dim() == inputs.dim() and base.shape == inputs.shape
    values = probabilities_after_removal(
        forward,
        inputs.repeat(2, *[1] * (inputs.dim() - 1)),
        torch.cat([pixel_ranks(blocks), pixel_ranks(-blocks)]),
        targets.repeat(2),
        job_sample=torch.arange(2 * b, device=inputs.device).repeat_interleave(r),
        job_k=k.repeat(2 * b),
        job_keep_top=torch.zeros(2 * b * r, dtype=torch.bool, device=inputs.device),
        baseline=base.repeat(2, *[1] * (base.dim() - 1)) if per_sample else baseline,
        activation=activation,
        chunk_size=chunk_size,
        fill=None if fill is None else lambda jobs, removed: fill(jobs % b, removed),
    ).reshape(2, b, r)
    morf, lerf = _scores(values[0], xs, undefined), _scores(values[1], xs, undefined)
    return FlippingScores(morf=morf, lerf=lerf, srg=_scores(lerf.curve - morf.curve, xs, undefined))


def _tie_exact_block_scores(maps: Tensor, b: int) -> Tensor:
    """:func:`block_scores` computed as block minimum + mean excess over it, so that a constant block scores exactly
    its value: equal blocks tie exactly (a plain mean of a partial border block can differ from a full block's by
    rounding, which would order a uniform map's blocks by rounding error)."""
    check_positive_int(b, "block_size")
    h, w = maps.shape[-2:]
    low = -F.max_pool2d(-maps.unsqueeze(1), b, ceil_mode=True).squeeze(1)
    low_px = low.repeat_interleave(b, dim=1).repeat_interleave(b, dim=2)[:, :h, :w]
    return block_scores(maps - low_px, b) + low


def _scores(curve: Tensor, xs: Tensor, undefined: Tensor) -> CurveScores:
    area = torch.trapezoid(curve, xs, dim=1) / (xs[-1] - xs[0])
    return CurveScores(values=area, undefined=undefined, curve=curve, fractions=xs)


# --------------------------------------------------------------------------- the suite's metrics


@dataclass(frozen=True)
class FlippingConfig:
    """``[flipping]``, shared by ``morf``, ``lerf`` and ``srg`` (one MoRF and one LeRF curve set per unit)."""

    block_size: int | None = None  # None: the data's image side / 14 (set by for_image)
    fractions: tuple[float, ...] = FLIPPING_FRACTIONS
    fill: str = "mean"  # mean | value | blur | model-input-zero | noise | road (metrics.flipping)
    fill_value: float = 0.0  # pixel value in [0, 1] for fill = "value"
    blur_sigma: float = 0.045  # Gaussian sigma as a fraction of the image side, for fill = "blur"
    road_noise: float = ROAD_NOISE  # sigma of ROAD's imputation noise (image units), for fill = "road"
    seed: int = 0  # keys the noise of fill = "noise" and "road"
    readout: str = "probability"  # probability (the model's activation) | logit

    protocols: ClassVar[dict[str, tuple]] = {
        "fill": ("mean", "blur", "noise", "road"),
        "readout": ("probability", "logit"),
    }
    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        if self.block_size is not None:
            check_positive_int(self.block_size, "block_size")
        if len(check_fractions(self.fractions, allow_zero=True)) < 2:
            raise ValueError("fractions: the curves' areas need at least two fractions")
        check_choice(self.fill, "fill", FILLS)
        if not 0.0 <= self.fill_value <= 1.0:
            raise ValueError(f"fill_value must be a pixel value in [0, 1], got {self.fill_value!r}")
        if not self.blur_sigma > 0:
            raise ValueError(f"blur_sigma must be > 0 (a fraction of the image side), got {self.blur_sigma!r}")
        if not self.road_noise >= 0:
            raise ValueError(f"road_noise must be a standard deviation >= 0 (image units), got {self.road_noise!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        check_choice(self.readout, "readout", READOUTS)

    def for_image(self, side: int) -> FlippingConfig:
        """The config on ``side`` px images: the default block size filled in, one that degenerates refused."""
        return resolve_block(self, side)


def unit_fill(
    unit: Unit, fill: str, ids: Tensor, *, value: float, blur_sigma: float, noise: float, seed: int
) -> tuple[float | Tensor, FillFn | None]:
    """(baseline, fill function) of ``fill`` for the unit's samples ``ids`` on the unit's device: the fill function
    (``road``) or else the baseline (model-input space) replaces the removed pixels."""
    if unit.model.modality != "image":
        raise ValueError(f"pixel flipping needs an image model; {unit.model.name!r} is a {unit.model.modality} model")
    images = unit.images[ids.cpu()]
    if fill == "road":
        mean_colour = unit.images.mean(dim=(0, 2, 3)).to(unit.device)
        encode = unit.model.encode
        return 0.0, road_fill(
            images.to(unit.device), encode, ids=ids.to(unit.device), noise=noise, seed=seed, fallback=mean_colour
        )
    if fill == "noise":
        u = hashed_uniform(ids.cpu(), tuple(images.shape[1:]), seed=seed, stream=STREAM_NOISE_FILL)
        return unit.model.encode(u.to(images.dtype)).to(unit.device), None
    base = removal_baseline(unit.model.encode, images, unit.images, fill, value=value, blur_sigma=blur_sigma)
    return (base.to(unit.device) if isinstance(base, Tensor) else base), None


def _flipping(unit: Unit, cfg: FlippingConfig) -> FlippingScores:
    def compute() -> FlippingScores:
        x, t, ids = unit.samples()
        baseline, fill = unit_fill(
            unit, cfg.fill, ids, value=cfg.fill_value, blur_sigma=cfg.blur_sigma, noise=cfg.road_noise, seed=cfg.seed
        )
        return pixel_flipping(
            unit.forward,
            x,
            unit.sample_maps(),
            t,
            block_size=cfg.block_size,
            fractions=cfg.fractions,
            baseline=baseline,
            fill=fill,
            activation=unit.model.activation if cfg.readout == "probability" else "identity",
            chunk_size=unit.eval_batch,
        )

    return unit.memo(("flipping", cfg), compute)


def _evaluate(part: str) -> Callable[[Unit, FlippingConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: FlippingConfig) -> MetricResult:
        _, _, ids = unit.samples()
        if len(ids) == 0:
            return MetricResult.empty(to_dict(cfg), "samples")
        res: CurveScores = getattr(_flipping(unit, cfg), part)
        return MetricResult.from_curve(res, sample_ids=ids, params=to_dict(cfg))

    return evaluate


def cost(unit: Unit, cfg: FlippingConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and a MoRF and a LeRF curve (one model input per sample and fraction each), computed once
    for morf, lerf and srg (the imputation of ``fill = "road"`` asks no model)."""
    n = len(unit.take(len(unit.sample_ids)))
    return (
        *sample_maps_cost(unit),
        MetricCost(("flipping", cfg), inputs=2 * n * len(cfg.fractions)),
    )


MORF = described("morf", evaluate=_evaluate("morf"), cost=cost, config=FlippingConfig)
LERF = described("lerf", evaluate=_evaluate("lerf"), cost=cost, config=FlippingConfig)
SRG = described("srg", evaluate=_evaluate("srg"), cost=cost, config=FlippingConfig)
