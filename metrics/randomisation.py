"""Model-randomisation sanity check (Adebayo et al. 2018, cascading randomisation).

A method whose maps survive the destruction of the model's weights does not explain the model. The
model's parameterised layers (modules that own parameters, in registration order: for the zoo's
networks the forward order) are re-initialised cumulatively from the top (the logit layer) down; at
``n_depths`` points of that cascade, spread evenly up to every layer, the method explains the same
samples for the same classes again, and each sample's maps are compared with the original ones:

    rho_k = Spearman(|a|, |a_k|)    (average ranks over the sample's features; text: its tokens)
    SSIM_k = SSIM(|a| / max|a|, |a_k| / max|a_k|)    (images: Gaussian window 11, sigma 1.5; Wang et al. 2004)

The curve is rho_k (or SSIM_k) against the randomised share of the layers; the per-sample score is
its mean over the depths: lower is better (1: the map ignores the model). Re-initialisation
(``init``): ``gaussian-matched`` (default) redraws every entry of each parameter tensor from a normal
distribution with that tensor's own mean and standard deviation (seeded), so activations keep their
scale; ``default`` calls the layer's own ``reset_parameters()`` (PyTorch's initialisation, seeded).
Tensors with fewer than two entries or no spread (e.g. a LayerNorm gain of exactly 1) are kept.
Buffers (BatchNorm running statistics) are kept, so normalisation stays finite. Samples whose
original map has no spread (constant, all zero) are undefined.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores
from faithbench.models.randomise import INITS, parameter_layers, randomise_layer

if TYPE_CHECKING:
    from faithbench.models.adapter import ModelAdapter


def cascade_depths(n_layers: int, n_depths: int) -> list[int]:
    """How many top layers are randomised at each evaluated point: ``n_depths`` values, evenly up to all."""
    return sorted({max(1, round(n_layers * (i + 1) / n_depths)) for i in range(n_depths)})


def average_ranks(x: Tensor) -> Tensor:
    """Ranks (0-based) along dim 1 of (B, F), tied values sharing their average rank."""
    b, f = x.shape
    values, order = x.sort(dim=1)
    new = torch.ones_like(values, dtype=torch.bool)
    new[:, 1:] = values[:, 1:] != values[:, :-1]
    group = new.long().cumsum(dim=1) - 1 + (torch.arange(b, device=x.device) * f).unsqueeze(1)  # unique per row
    pos = torch.arange(f, device=x.device, dtype=torch.float64).expand(b, f)
    total = torch.zeros(b * f, dtype=torch.float64, device=x.device).index_add_(0, group.reshape(-1), pos.reshape(-1))
    count = torch.zeros(b * f, dtype=torch.float64, device=x.device).index_add_(
        0, group.reshape(-1), torch.ones(b * f, dtype=torch.float64, device=x.device)
    )
    sorted_rank = (total / count.clamp(min=1))[group]
    return torch.empty_like(sorted_rank).scatter_(1, order, sorted_rank)


def spearman(a: Tensor, b: Tensor, feature_mask: Tensor | None = None) -> Tensor:
    """Per-sample Spearman correlation of (B, ...) maps over their features (NaN where either has no spread)."""
    a, b = a.reshape(a.shape[0], -1).double(), b.reshape(b.shape[0], -1).double()
    w = torch.ones_like(a) if feature_mask is None else feature_mask.reshape(a.shape).double()
    inf = torch.tensor(math.inf, dtype=torch.float64, device=a.device)
    ra = average_ranks(torch.where(w > 0, a, inf))  # non-features rank last, all tied: the features keep 0..n-1
    rb = average_ranks(torch.where(w > 0, b, inf))
    n = w.sum(dim=1, keepdim=True)
    da, db = (ra - (ra * w).sum(1, keepdim=True) / n) * w, (rb - (rb * w).sum(1, keepdim=True) / n) * w
    denom = (da.pow(2).sum(1) * db.pow(2).sum(1)).sqrt()
    return torch.where(denom > 0, (da * db).sum(1) / denom.clamp(min=1e-300), torch.nan)


def ssim(a: Tensor, b: Tensor, *, sigma: float = 1.5, radius: int = 5) -> Tensor:
    """Mean SSIM of (B, H, W) images in [0, 1] (Gaussian window, the valid region only; Wang et al. 2004)."""
    x = torch.arange(-radius, radius + 1, dtype=torch.float64, device=a.device)
    g = torch.exp(-0.5 * (x / sigma) ** 2)
    g = g / g.sum()

    def blur(t: Tensor) -> Tensor:
        t = F.conv2d(t.unsqueeze(1), g.view(1, 1, 1, -1))
        return F.conv2d(t, g.view(1, 1, -1, 1)).squeeze(1)

    a, b = a.double(), b.double()
    c1, c2 = 0.01**2, 0.03**2
    mu_a, mu_b = blur(a), blur(b)
    var_a, var_b = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return s.mean(dim=(1, 2))


@dataclass(frozen=True)
class RandomisationConfig:
    """``[randomisation]``: the first ``n_samples`` per-sample inputs, ``n_depths`` cascade points."""

    n_samples: int = 16
    n_depths: int = 4
    init: str = "gaussian-matched"
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive_int(self.n_samples, "n_samples")
        check_positive_int(self.n_depths, "n_depths")
        check_choice(self.init, "init", INITS)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


def _first_samples(unit: Unit, cfg: RandomisationConfig) -> int:
    """How many of the suite's first ``n_samples`` samples this piece holds (wherever the pieces put them: a piece's
    positions rise, so they are a prefix of its own)."""
    return int(unit.first_samples(cfg.n_samples).sum())


BatchExplain = Callable[[Tensor, Tensor, Tensor, "ModelAdapter", str], Tensor]
"""``explain(inputs (k, ...), targets (k,), ids (k,), model, tag) -> maps (k, ...)``: how the cascade explains its
samples on one model (``tag``: the model's name in the map store)."""


def cascade_maps(
    unit: Unit, cfg: RandomisationConfig, explain: BatchExplain | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor, dict]:
    """(original maps (S, ...), randomised maps (K, S, ...), depth shares (K,), sample ids, params) of this shard.

    ``explain``: how the samples are explained on the trained model and on each randomised copy (sMPRT: averaged
    over noisy copies); default: once each, ``explain_batch`` at a time, the trained model's maps being the sample
    maps."""
    x, _, ids = unit.samples()
    targets = unit.sample_targets("label")
    k = _first_samples(unit, cfg)
    x, targets, ids = x[:k], targets[:k], ids[:k]
    b = unit.explain_batch

    def once(inputs: Tensor, classes: Tensor, _ids: Tensor, model: ModelAdapter, tag: str) -> Tensor:
        chunks = in_chunks(lambda s, e: unit.explain(inputs[s:e], classes[s:e], model=model, tag=tag), len(inputs), b)
        return torch.cat(chunks)

    def explain_on(model: ModelAdapter, tag: str) -> Tensor:
        if k == 0:  # a piece without any of them
            return x.new_zeros((0, *x.shape[2:]))
        return (explain or once)(x, targets, ids, model, tag)

    original = unit.sample_maps()[:k] if explain is None else explain_on(unit.model, "model")
    layers = parameter_layers(unit.model.module)
    depths = cascade_depths(len(layers), cfg.n_depths)
    module = copy.deepcopy(unit.model.module)
    copied = dict(parameter_layers(module))
    randomised = dataclasses.replace(unit.model, module=module)
    gen = torch.Generator().manual_seed(cfg.seed)
    maps, done = [], 0
    for depth in depths:
        for name, _ in reversed(layers[len(layers) - depth : len(layers) - done]):
            randomise_layer(copied[name], cfg.init, gen)
        done = depth
        maps.append(explain_on(randomised, f"randomised:{cfg.init}:{cfg.seed}:{depth}/{len(layers)}"))
    shares = torch.tensor([d / len(layers) for d in depths])
    # the unit's count over all pieces (its rows' protocol), not this piece's k
    first = min(cfg.n_samples, len(unit.sample_ids))
    params = {"n_layers": len(layers), "depths": depths, "init": cfg.init, "seed": cfg.seed, "n_samples": first}
    return original, torch.stack(maps), shares, ids, params


def not_applicable(unit: Unit) -> str | None:
    if unit.model.native_explainer is not None and unit.method.capabilities.needs_native:
        return "the model's own explainer is bound to its original weights"
    return None


def cascade_curves(unit: Unit, cfg: RandomisationConfig) -> tuple:
    """:func:`cascade_maps` once per unit (its time recorded as ``randomisation``), shared by every metric of the
    ``[randomisation]`` table."""
    unit.sample_maps()  # timed as the sample maps, not as the cascade's
    return unit.memo(
        ("randomisation", cfg), lambda: unit.timed_explanation("randomisation", lambda: cascade_maps(unit, cfg))
    )


def evaluate_spearman(unit: Unit, cfg: RandomisationConfig) -> MetricResult:
    """Per sample: the mean over the cascade of the Spearman correlation of |original| and |randomised| maps."""
    original, maps, shares, ids, params = cascade_curves(unit, cfg)
    if len(ids) == 0:
        return MetricResult.empty(params, "randomisation")
    mask = unit.sample_feature_mask()
    mask = None if mask is None else mask[: len(ids)]
    curve = torch.stack([spearman(original.abs(), m.abs(), mask) for m in maps], dim=1)  # (S, K)
    undefined = curve.isnan().any(dim=1)
    return _result(curve, undefined, shares, ids, params)


def _result(curve: Tensor, undefined: Tensor, shares: Tensor, ids: Tensor, params: dict) -> MetricResult:
    """Per sample: the mean over the cascade of the similarity ``curve`` (S, K) at the randomised ``shares``."""
    scores = CurveScores(values=curve.mean(dim=1), undefined=undefined, curve=curve, fractions=shares)
    return MetricResult.from_curve(scores, sample_ids=ids, params=params, explained="randomisation")


def max_normalised(maps: Tensor) -> Tensor:
    peak = maps.abs().flatten(1).amax(dim=1).view(-1, *[1] * (maps.dim() - 1))
    return maps.abs() / peak.clamp(min=1e-30)


def evaluate_ssim(unit: Unit, cfg: RandomisationConfig) -> MetricResult:
    """Per sample: the mean over the cascade of the SSIM of the max-normalised |maps|."""
    original, maps, shares, ids, params = cascade_curves(unit, cfg)
    if len(ids) == 0:
        return MetricResult.empty(params, "randomisation")
    flat = original.flatten(1)
    undefined = flat.amax(dim=1) == flat.amin(dim=1)  # a constant map has no structure to compare
    curve = torch.stack([ssim(max_normalised(original), max_normalised(m)) for m in maps], dim=1)
    curve = torch.where(undefined.unsqueeze(1), torch.nan, curve)
    return _result(curve, undefined, shares, ids, params)


def cost(unit: Unit, cfg: RandomisationConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and the first ``n_samples`` of them explained again at every depth of the cascade (a model
    without the layers to tell, a stand-in, is taken to have ``n_depths`` distinct depths)."""
    k = _first_samples(unit, cfg)
    layers = len(parameter_layers(unit.model.module))
    depths = len(cascade_depths(layers, cfg.n_depths)) if layers else cfg.n_depths
    return (*sample_maps_cost(unit), MetricCost(("randomisation", cfg), explanations=k * depths, passes=depths))


RANDOMISATION = described(
    "randomisation",
    evaluate=evaluate_spearman,
    cost=cost,
    config=RandomisationConfig,
    applies=not_applicable,
)
RANDOMISATION_SSIM = described(
    "randomisation_ssim",
    evaluate=evaluate_ssim,
    cost=cost,
    config=RandomisationConfig,
    applies=not_applicable,
)
