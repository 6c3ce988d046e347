"""ROAD: RemOve And Debias (Rong et al., ICML 2022).

For each fraction f the k_f = floor(f * H * W) most relevant pixels (MoRF; the channel-summed map, ties
broken by position, earlier pixel first) are removed by noisy linear imputation
(:mod:`faithbench.metrics.imputation`: every removed pixel the weighted mean of its 8 neighbours, plus
N(0, noise^2), in image space, then encoded per model), and the model is asked again:

    c_f = 1[argmax_y f(x_f) = target]          (``readout = "accuracy"``: ROAD's accuracy, Quantus' indicator)
    c_f = p(target | x_f)                      (``readout = "probability"``: the model's activation)

Score = mean over the fractions of c_f (lower is better: removing what the map calls relevant should
break the prediction). Its mean over samples is the mean of ROAD's accuracy curve over the fractions
(pytorch-grad-cam's "ROAD most relevant first, average"); the per-fraction curve is kept.

Conventions: the default fractions are those of the authors' code (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9);
Quantus' default is every odd percent (``QUANTUS_FRACTIONS``), removing the same floor(f * H * W) pixels
(Quantus ranks single-channel maps only: it fails on RGB input). Imputation noise 0.01 is the paper's
and Quantus' value; the authors' code imputes images in [0, 1] before normalising them, as here, while
Quantus adds it in whatever space its input is. The LeRF order and a symmetric score with this removal
are the ``lerf`` / ``srg`` metrics with ``fill = "road"`` (:mod:`faithbench.metrics.flipping`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_fractions
from faithbench.metrics._perturb import ForwardFn, feature_ranks, probabilities_after_removal, unranked
from faithbench.metrics.deletion import check_curve_inputs
from faithbench.metrics.imputation import ROAD_DTYPE, ROAD_MAX_ITER, ROAD_NOISE, ROAD_TOL, road_fill
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores

ROAD_FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)
QUANTUS_FRACTIONS: tuple[float, ...] = tuple(p / 100 for p in range(1, 100, 2))
READOUTS = ("accuracy", "probability")


def _still_correct(scores: Tensor, targets: Tensor) -> Tensor:
    return (scores.argmax(dim=1) == targets).float()


def road(
    forward: ForwardFn,
    images: Tensor,
    attributions: Tensor,
    targets: Tensor,
    *,
    encode: Callable[[Tensor], Tensor] = lambda x: x,
    fractions: Sequence[float] = ROAD_FRACTIONS,
    noise: float = ROAD_NOISE,
    readout: str = "accuracy",
    activation: str = "softmax",
    seed: int = 0,
    ids: Tensor | None = None,
    fallback: float | Tensor | None = None,
    tol: float = ROAD_TOL,
    max_iter: int = ROAD_MAX_ITER,
    chunk_size: int = 256,
    dtype: torch.dtype = ROAD_DTYPE,
) -> CurveScores:
    """ROAD curves (B, R) and scores (B,) of a batch of explanations (the conventions: the module docstring).

    With x_f the image whose k_f = floor(f H W) most relevant pixels are replaced by noisy linear imputation,
    c_f = 1[argmax f(x_f) = target] (``accuracy``) or p(target | x_f) (``probability``), and

        score = mean over the fractions f of c_f        (lower is better).

    Args:
        forward: ``forward(encode(images)) -> (n, K)`` logits.
        images: (B, c, H, W) in [0, 1] (image space: the imputation works there).
        attributions: (B, H, W), or (B, c', H, W) summed over channels.
        targets: (B,) explained classes.
        encode: images in [0, 1] -> model input (normalisation, the B-cos [x, 1-x] encoding).
        fractions: increasing fractions of pixels removed, in (0, 1].
        noise: standard deviation of the imputation noise (image units; 0: plain linear imputation).
        readout: ``accuracy`` (is the target still the top class) or ``probability``.
        activation: ``softmax``, ``sigmoid`` or ``identity`` (``probability`` readout only).
        seed, ids: key the noise (``ids`` (B,) sample ids, default 0..B-1; see imputation).
        fallback: value of an image whose every pixel is removed (default: the batch's mean colour).
        tol, max_iter: the imputation solver's tolerance (its estimate of the largest error left, image units)
            and iteration cap.
        chunk_size: imputed images per model call.
        dtype: the imputation solver's dtype (float32; float64 for tolerances under ~1e-6).

    Example:
        >>> import torch
        >>> from faithbench.metrics.road import road
        >>> i = torch.arange(4.0)
        >>> image = ((i[:, None] + i[None, :]) / 6).expand(1, 1, 4, 4)  # brighter to the bottom right, mean 0.5
        >>> def forward(x):  # class 0 while the mean brightness is above 0.4
        ...     return torch.stack([x.flatten(1).mean(1), torch.full((len(x),), 0.4)], 1)
        >>> out = road(forward, image, image[:, 0], torch.tensor([0]), fractions=(0.25, 0.5), noise=0.0)
        >>> out.curve, out.values  # still class 0 with the brightest 25 % imputed, not with 50 %
        (tensor([[1., 0.]]), tensor([0.5000]))
    """
    check_choice(readout, "readout", READOUTS)
    attributions, targets, frac = check_curve_inputs(
        images, attributions, targets, fractions, activation, name="images", allow_zero=False, min_fractions=1
    )
    b, _, h, w = images.shape
    device = images.device
    ids = torch.arange(b, device=device) if ids is None else ids.to(device)
    if ids.shape != (b,):
        raise ValueError(f"ids must have shape ({b},) to match the batch, got {tuple(ids.shape)}")
    if fallback is None:
        fallback = images.mean(dim=(0, 2, 3))
    k = torch.floor(frac * (h * w) + 1e-6).long().to(device)  # floor(f H W), robust to 0.29 * 100 = 28.99..
    r = k.numel()
    ranks = feature_ranks(attributions.float().reshape(b, -1)).reshape(b, h, w)
    fill = road_fill(
        images, encode, ids=ids, noise=noise, seed=seed, fallback=fallback, tol=tol, max_iter=max_iter, dtype=dtype
    )
    curve = probabilities_after_removal(
        forward,
        encode(images),
        ranks,
        targets,
        job_sample=torch.arange(b, device=device).repeat_interleave(r),
        job_k=k.repeat(b),
        job_keep_top=torch.zeros(b * r, dtype=torch.bool, device=device),
        baseline=0.0,
        activation=activation,
        chunk_size=chunk_size,
        fill=fill,
        score=_still_correct if readout == "accuracy" else None,
    ).reshape(b, r)
    return CurveScores(
        values=curve.mean(dim=1),
        undefined=unranked(attributions),
        curve=curve,
        fractions=frac.to(device=device, dtype=torch.float32),
    )


# --------------------------------------------------------------------------- the suite's metric


@dataclass(frozen=True)
class RoadConfig:
    """``[road]``: ROAD's MoRF accuracy curve with noisy linear imputation."""

    fractions: tuple[float, ...] = ROAD_FRACTIONS  # pixels removed; Quantus: every odd percent 0.01 .. 0.99
    noise: float = ROAD_NOISE  # imputation noise sigma, image units
    readout: str = "accuracy"  # accuracy | probability
    seed: int = 0  # keys the imputation noise
    tol: float = ROAD_TOL  # solver tolerance: its estimate of the largest imputation error left, image units
    max_iter: int = ROAD_MAX_ITER  # solver iterations at most

    protocols: ClassVar[dict[str, tuple]] = {"readout": ("accuracy", "probability")}  # rescore --sweep
    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        check_fractions(self.fractions, allow_zero=False)
        if not self.noise >= 0:
            raise ValueError(f"noise must be a standard deviation >= 0 (image units), got {self.noise!r}")
        check_choice(self.readout, "readout", READOUTS)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0 (image units), got {self.tol!r}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, int) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")


def _evaluate(unit: Unit, cfg: RoadConfig) -> MetricResult:
    _, t, ids = unit.samples()
    if len(ids) == 0:
        return MetricResult.empty(to_dict(cfg), "samples")
    if unit.model.modality != "image":
        raise ValueError(f"ROAD needs an image model; {unit.model.name!r} is a {unit.model.modality} model")
    res = road(
        unit.forward,
        unit.images[ids.cpu()].to(unit.device),
        unit.sample_maps(),
        t,
        encode=unit.model.encode,
        fractions=cfg.fractions,
        noise=cfg.noise,
        readout=cfg.readout,
        activation=unit.model.activation,
        seed=cfg.seed,
        ids=ids,
        fallback=unit.images.mean(dim=(0, 2, 3)).to(unit.device),
        tol=cfg.tol,
        max_iter=cfg.max_iter,
        chunk_size=unit.eval_batch,
    )
    return MetricResult.from_curve(res, sample_ids=ids, params=to_dict(cfg))


def cost(unit: Unit, cfg: RoadConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and one model input per sample and fraction (the imputation asks no model)."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit), MetricCost(("road", cfg), inputs=n * len(cfg.fractions)))


SPEC = described("road", evaluate=_evaluate, cost=cost, config=RoadConfig)
