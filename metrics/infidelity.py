"""Infidelity (Yeh et al., NeurIPS 2019): how well the map, summed over a perturbation, predicts the change of the
model's output under that perturbation. For ``n`` perturbations ``I_k`` of an input ``x`` and the explained class's
logit ``f``::

    d_k = f(x) - f(x - I_k)                    (the output's drop)
    p_k = sum_i a_i r_ki                       (what the map says it should be)
    infidelity = mean_k (p_k - d_k)^2          normalize: beta = sum_k p_k d_k / sum_k p_k^2,
                                               infidelity = mean_k (beta p_k - d_k)^2       (captum's convention)

``r_ki`` is the fraction of feature ``i`` that the perturbation moves to the baseline ``b``: ``(x - x_k) / (x - b)``
(captum's ``multiply_by_inputs`` convention with a baseline, ``x - x_k`` where ``x = b``, as its ``safe_div``),
averaged over a pixel's channels because maps are one value per pixel (exact for single-channel images). It is the
convention for maps that are contributions (input x gradient, IntegratedGradients, W(x)x, LRP, DeepLIFT, Shapley);
a removed square has ``r = 1`` inside and 0 outside, so ``p_k`` is the map's sum over the square. Signed maps are
used as they are (Quantus PR #376: no absolute value). Lower is more faithful; 0 when every drop is predicted.

Perturbations (in the image, in [0, 1], then encoded per model, as deletion's baselines):

* ``square`` -- a square of side ``square_size`` x the image side, at a uniformly random position inside the image,
  set to the baseline (Yeh et al.'s square removal);
* ``noisy-baseline`` -- every pixel set to ``b + noise_std * e``, ``e`` standard normal per pixel (shared by its
  channels; Yeh et al.'s noisy baseline).

Positions and noise are a function of the seed and the sample's id (the same on every device, piece and batch). The
perturbed images, their logits and the fractions do not depend on the method: they are computed once per model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from faithbench.calls import call_key, in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.baselines import IMAGE_BASELINES, BaselineConfig, image_baseline
from faithbench.metrics.imputation import hashed_normal, hashed_uniform
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described

STREAM_INFIDELITY = 4  # the keyed draws' stream (metrics.imputation: 1 and 2; metrics.robustness: 3)
PERTURBATIONS = ("square", "noisy-baseline")


def infidelity(predicted: Tensor, drops: Tensor, *, normalize: bool = False) -> Tensor:
    """(B,) float64 infidelity from (B, n) ``predicted`` changes ``p_k = sum_i a_i r_ki`` and the output's ``drops``
    ``d_k`` (formula in the module docstring).

    >>> import torch
    >>> from faithbench.metrics.infidelity import infidelity
    >>> infidelity(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 4.0]]))  # ((1 - 1)^2 + (2 - 4)^2) / 2
    tensor([2.], dtype=torch.float64)
    >>> infidelity(torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 4.0]]), normalize=True)  # beta = 2: exact
    tensor([0.], dtype=torch.float64)
    """
    if predicted.shape != drops.shape or predicted.dim() != 2:
        raise ValueError(f"predicted and drops must both be (B, n), got {tuple(predicted.shape)}, {tuple(drops.shape)}")
    p, d = predicted.double(), drops.double()
    if normalize:
        num, den = (p * d).sum(dim=1, keepdim=True), p.pow(2).sum(dim=1, keepdim=True)
        p = p * torch.where(den != 0, num / den.where(den != 0, 1.0), num)  # captum's safe_div: by 1 where 0
    return (p - d).pow(2).mean(dim=1)


def removed_fraction(images: Tensor, perturbed: Tensor, baseline: Tensor) -> Tensor:
    """(B, H, W) ``r``: how much of each pixel of ``images`` (B, c, H, W) ``perturbed`` moved to ``baseline``
    (broadcastable), ``(x - x_k) / (x - b)`` averaged over channels (``x - x_k`` where ``x = b``).

    >>> import torch
    >>> from faithbench.metrics.infidelity import removed_fraction
    >>> x = torch.tensor([[[[0.8, 0.4]]]])  # one image, one channel, 1 x 2 pixels
    >>> removed_fraction(x, torch.tensor([[[[0.0, 0.4]]]]), torch.zeros(1))  # the first pixel removed, the second kept
    tensor([[[1., 0.]]])
    """
    gap = images - baseline
    moved = images - perturbed
    return torch.where(gap != 0, moved / gap.where(gap != 0, 1.0), moved).mean(dim=1)


def square_masks(corners: Tensor, side: int, height: int, width: int) -> Tensor:
    """(R, H, W) bool: squares of ``side`` px with top-left ``corners`` (R, 2) (row, column)."""
    rows = torch.arange(height, device=corners.device)
    cols = torch.arange(width, device=corners.device)
    r0, c0 = corners[:, :1, None], corners[:, 1:, None]
    return ((rows[None, :, None] >= r0) & (rows[None, :, None] < r0 + side)) & (
        (cols[None, None, :] >= c0) & (cols[None, None, :] < c0 + side)
    )


@dataclass(frozen=True)
class InfidelityConfig(BaselineConfig):
    """``[infidelity]``: ``n_perturbations`` perturbations (captum's ``n_perturb_samples``) of each of the suite's
    first ``max_samples`` samples (0: all), of kind ``perturbation`` to the image-space ``baseline``;
    ``square_size`` (a fraction of the image side) or ``noise_std`` (pixel units); ``normalize`` as captum's; the
    draws keyed by ``seed``."""

    perturbation: str = "square"
    n_perturbations: int = 10
    square_size: float = 0.15
    noise_std: float = 0.2
    normalize: bool = False
    max_samples: int = 0
    seed: int = 0

    baselines: ClassVar[tuple[str, ...]] = IMAGE_BASELINES  # the fractions are image-space ones
    protocols: ClassVar[dict[str, tuple]] = {"perturbation": PERTURBATIONS}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.perturbation, "perturbation", PERTURBATIONS)
        check_positive_int(self.n_perturbations, "n_perturbations")
        if isinstance(self.square_size, bool) or not 0 < self.square_size <= 1:
            raise ValueError(f"square_size must be a fraction of the image side in (0, 1], got {self.square_size!r}")
        if isinstance(self.noise_std, bool) or not self.noise_std > 0:
            raise ValueError(f"noise_std must be > 0 (pixel units), got {self.noise_std!r}")
        if not isinstance(self.normalize, bool):
            raise ValueError(f"normalize must be true or false, got {self.normalize!r}")
        for name in ("max_samples", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def perturb_images(images: Tensor, ids: Tensor, draws: Tensor, baseline: Tensor, cfg: InfidelityConfig) -> Tensor:
    """The perturbed images (R, c, H, W) of rows (sample ``images[i]``, its id ``ids[i]``, draw ``draws[i]``)."""
    _, _, h, w = images.shape
    if cfg.perturbation == "square":
        side = max(1, round(cfg.square_size * min(h, w)))
        u = hashed_uniform(ids.cpu(), (cfg.n_perturbations, 2), seed=cfg.seed, stream=STREAM_INFIDELITY)
        u = u[torch.arange(len(ids)), draws.cpu()]  # (R, 2)
        corners = (u * torch.tensor([h - side + 1, w - side + 1])).floor().long().to(images.device)
        mask = square_masks(corners, side, h, w).unsqueeze(1)
        return torch.where(mask, baseline.expand_as(images), images)
    e = hashed_normal(ids.cpu(), (cfg.n_perturbations, 1, h, w), seed=cfg.seed, stream=STREAM_INFIDELITY)
    e = e[torch.arange(len(ids)), draws.cpu()].float().to(images.device)  # (R, 1, H, W): shared by the channels
    return (baseline + cfg.noise_std * e).expand_as(images)


def model_drops(unit: Unit, cfg: InfidelityConfig) -> tuple[Tensor, Tensor]:
    """(S, n, H, W) the fractions ``r`` and (S, n) the logit drops ``d`` of this piece's samples among the first
    ``max_samples``: once per model (the perturbations do not depend on the method), ``eval_batch`` inputs a call."""

    def compute() -> tuple[Tensor, Tensor]:
        x, labels, ids = unit.samples()
        first = unit.first_samples(cfg.max_samples)
        x, labels, ids = x[first.to(x.device)], labels[first.to(x.device)], ids[first]
        images = unit.images[ids].to(unit.device)
        source = unit.images if cfg.baseline == "mean" else unit.images[ids]
        base = image_baseline(source, cfg.baseline, value=cfg.baseline_value, blur_sigma=cfg.blur_sigma)
        base = base.to(unit.device)
        module, n = unit.forward, cfg.n_perturbations
        key = call_key(module, tuple(x.shape[1:]), "without")
        with torch.no_grad():
            logits = torch.cat(in_chunks(lambda s, e: module(x[s:e]), len(x), unit.eval_batch, key=key))
        f0 = logits.gather(1, labels.view(-1, 1)).squeeze(1)

        def rows(start: int, stop: int) -> tuple[Tensor, Tensor]:
            r = torch.arange(start, stop, device=unit.device)
            sample, draw = r // n, r % n
            b = base if base.shape[0] == 1 else base[sample]
            moved = perturb_images(images[sample], ids[sample.cpu()], draw, b, cfg)
            with torch.no_grad():
                f = module(unit.model.encode(moved)).gather(1, labels[sample].view(-1, 1)).squeeze(1)
            return removed_fraction(images[sample], moved, b), (f0[sample] - f).double()

        out = in_chunks(rows, len(ids) * n, unit.eval_batch, key=key)
        h, w = images.shape[-2:]
        fractions = torch.cat([o[0] for o in out]).view(len(ids), n, h, w) if out else images.new_zeros(0, n, h, w)
        drops = torch.cat([o[1] for o in out]).view(len(ids), n) if out else images.new_zeros(0, n).double()
        return fractions, drops

    return unit.per_model(("infidelity", cfg), compute)


def evaluate(unit: Unit, cfg: InfidelityConfig) -> MetricResult:
    _, _, ids = unit.samples()
    first = unit.first_samples(cfg.max_samples)
    ids = ids[first]
    params = {**to_dict(cfg), "readout": "logit", "fraction": "multiply_by_inputs"}
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    fractions, drops = model_drops(unit, cfg)
    maps = unit.sample_maps()[first.to(unit.device)]
    predicted = (fractions.double() * maps.double().unsqueeze(1)).sum(dim=(2, 3))
    values = infidelity(predicted, drops, normalize=cfg.normalize)
    return MetricResult(values=values, undefined=torch.zeros_like(values, dtype=torch.bool), sample_ids=ids,
                        params=params, explained="samples")  # fmt: skip


def cost(unit: Unit, cfg: InfidelityConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps; once per model, the samples' logits and every perturbed copy's."""
    n = int(unit.first_samples(cfg.max_samples).sum())
    return (*sample_maps_cost(unit), MetricCost(("infidelity", cfg), inputs=n, scope="model"),
            MetricCost(("infidelity", cfg, "perturbed"), inputs=n * cfg.n_perturbations, scope="model"))  # fmt: skip


INFIDELITY = described("infidelity", evaluate=evaluate, cost=cost, config=InfidelityConfig)
