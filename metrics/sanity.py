"""The newer sanity checks beside the cascading randomisation (:mod:`faithbench.metrics.randomisation`).

**eMPRT** (efficient model-parameter randomisation, Hedström et al., TMLR 2024): a map of a fully randomised model
should be more complex than the trained model's. With ``H`` the discrete entropy of a map's values in a 100-bin
histogram (Quantus' ``discrete_entropy``: ``np.histogram`` over the map's range, natural log)::

    emprt = (H(a_random) - H(a)) / H(a)        higher is better (0: randomising the model changed nothing)

``a_random`` is the map at the last point of the ``[randomisation]`` cascade, where every parameterised layer is
re-initialised, so it shares that table and its re-explanations (the same first ``n_samples`` samples; ``init``
``default`` is Quantus' ``reset_parameters``). A sample whose trained map has ``H = 0`` (constant) is undefined.

**sMPRT** (smooth model-parameter randomisation, Hedström et al. 2024 as eMPRT, first in their 2023 workshop paper
"Sanity Checks Revisited", which Quantus' ``SmoothMPRT`` cites): the ``randomisation`` cascade where every map, the
trained model ``f``'s and each randomised copy ``f_k``'s, is first averaged over ``N`` (``n_noisy``) copies of the
input with Gaussian noise, so that the maps' own noise does not decide the comparison::

    a~(g, x) = (1 / N) sum_j a(g, x + d_j),    d_j ~ N(0, s^2) for j < N - 1,  d_{N-1} = 0,
    s = noise_magnitude * (max x - min x)                       (the sample's range, in the model's input space)
    smprt = mean_k similarity(a~(f, x), a~(f_k, x))            lower is better (1: the map ignores the model)

``similarity``: ``spearman`` (default, Quantus': of the |maps|, text over its tokens, as ``randomisation``) or
``ssim`` (of the max-normalised |maps|, as ``randomisation_ssim``; images only). As Quantus, the last copy is the input
itself (``N = 1`` is ``randomisation``). The draws are a function of (seed, sample id), the same for the trained model
and every point of the cascade (Quantus draws afresh for each model), in ``[smprt]``'s own cascade (its ``n_samples``,
``n_depths``, ``init``, ``seed``). Text: the noise lands on the embeddings at the real positions only (padding stays
all-zero, so it stays padding) and the range is theirs.

**RandomLogit** (Sixt et al., ICML 2020; Quantus, xplique): the map of the explained class ``y`` against the map of a
random other class ``y'`` of the same input::

    random_logit = similarity(a_y, a_y')       lower is better (the map depends on the class)

``y'`` is drawn uniformly among the other classes, a function of the seed and the sample's id. ``similarity``:
``ssim`` (default; the SSIM of the max-normalised |maps|, as ``randomisation_ssim``), ``spearman`` (of the |maps|,
as ``randomisation``) or ``quantus-ssim`` (Quantus' ``RandomLogit``: the maps divided by their largest |entry|,
flattened, skimage's SSIM with a 7-wide uniform window over the 1-D vectors and the pair's joint range).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.imputation import hashed_normal, hashed_uniform
from faithbench.metrics.randomisation import (
    BatchExplain,
    RandomisationConfig,
    cascade_curves,
    cascade_maps,
    max_normalised,
    not_applicable,
    spearman,
    ssim,
)
from faithbench.metrics.randomisation import cost as cascade_cost
from faithbench.metrics.robustness import real_positions
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import CurveScores

STREAM_RANDOM_LOGIT = 5  # the keyed draws' stream (imputation: 1, 2; robustness: 3; infidelity: 4)
STREAM_SMPRT = 6  # sMPRT's input noise
SIMILARITIES = ("ssim", "spearman", "quantus-ssim")
SMPRT_SIMILARITIES = ("spearman", "ssim")  # quantus-ssim is RandomLogit's convention (signed maps), not SmoothMPRT's


def histogram_entropy(maps: Tensor, n_bins: int = 100) -> Tensor:
    """(B,) float64 entropy (natural log) of each map's values in ``n_bins`` equal bins over its own range, the
    last bin closed (``scipy.stats.entropy(np.histogram(a, bins=n_bins)[0])``, bins as numpy's in the map's dtype; a
    constant map: one bin, entropy 0).

    >>> import torch
    >>> from faithbench.metrics.sanity import histogram_entropy
    >>> histogram_entropy(torch.tensor([[0.0, 0.0, 1.0, 1.0], [5.0, 5.0, 5.0, 5.0]]))  # two equal bins: log 2
    tensor([0.6931, 0.0000], dtype=torch.float64)
    """
    check_positive_int(n_bins, "n_bins")
    v = maps.reshape(maps.shape[0], -1)
    lo, hi = v.amin(dim=1), v.amax(dim=1)
    same = lo == hi
    lo, hi = torch.where(same, lo - 0.5, lo), torch.where(same, hi + 0.5, hi)  # numpy's rule for an empty range
    steps = torch.arange(n_bins + 1, dtype=torch.float64, device=v.device) / n_bins
    edges = (lo.double().unsqueeze(1) + steps * (hi.double() - lo.double()).unsqueeze(1)).to(v.dtype)
    edges[:, -1] = hi  # linspace ends on its stop exactly
    index = (torch.searchsorted(edges.contiguous(), v.contiguous(), right=True) - 1).clamp(0, n_bins - 1)
    counts = torch.zeros(v.shape[0], n_bins, dtype=torch.float64, device=v.device)
    counts.scatter_add_(1, index, torch.ones_like(index, dtype=torch.float64))
    p = counts / counts.sum(dim=1, keepdim=True)
    return (p * p.where(p > 0, 1.0).log()).sum(dim=1).neg() + 0.0  # + 0.0: no -0.0


def emprt(original: Tensor, randomised: Tensor, n_bins: int = 100) -> tuple[Tensor, Tensor]:
    """(B,) the relative rise of the maps' histogram entropy from ``original`` to ``randomised`` maps and (B,)
    undefined where the original map's entropy is 0.

    >>> import torch
    >>> from faithbench.metrics.sanity import emprt
    >>> rise, undefined = emprt(torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([[0.0, 1.0, 2.0, 3.0]]))
    >>> rise, undefined  # log 2 -> log 4: twice the entropy
    (tensor([1.], dtype=torch.float64), tensor([False]))
    """
    h0, h1 = histogram_entropy(original, n_bins), histogram_entropy(randomised, n_bins)
    undefined = h0 == 0
    return (h1 - h0) / h0.where(~undefined, 1.0), undefined


def flat_ssim(a: Tensor, b: Tensor, *, win_size: int = 7) -> Tensor:
    """(B,) float64 SSIM of the flattened rows of ``a`` and ``b`` with a ``win_size``-wide uniform window and the
    pair's joint range as the data range (``skimage.metrics.structural_similarity`` on 1-D arrays, sample covariance,
    K1 = 0.01, K2 = 0.03, the border's half window left out: Quantus' ``ssim``); NaN where both rows are one value.

    >>> import torch
    >>> from faithbench.metrics.sanity import flat_ssim
    >>> a = torch.arange(10.0).view(1, 10)
    >>> flat_ssim(a, a), flat_ssim(a, 9 - a).round(decimals=4)
    (tensor([1.], dtype=torch.float64), tensor([-0.8741], dtype=torch.float64))
    """
    a, b = a.reshape(a.shape[0], -1).double(), b.reshape(b.shape[0], -1).double()
    both = torch.cat([a, b], dim=1)
    span = both.amax(dim=1, keepdim=True) - both.amin(dim=1, keepdim=True)
    c1, c2 = (0.01 * span) ** 2, (0.03 * span) ** 2

    def mean(t: Tensor) -> Tensor:
        return F.avg_pool1d(t.unsqueeze(1), win_size, stride=1).squeeze(1)

    ua, ub = mean(a), mean(b)
    norm = win_size / (win_size - 1)
    va, vb, cov = norm * (mean(a * a) - ua**2), norm * (mean(b * b) - ub**2), norm * (mean(a * b) - ua * ub)
    s = ((2 * ua * ub + c1) * (2 * cov + c2)) / ((ua**2 + ub**2 + c1) * (va + vb + c2))
    return s.mean(dim=1)


def map_similarity(a: Tensor, b: Tensor, similarity: str) -> Tensor:
    """(B,) the ``similarity`` (see the module docstring) of maps ``a`` and ``b`` (B, H, W), NaN where undefined."""
    check_choice(similarity, "similarity", SIMILARITIES)
    if similarity == "spearman":
        return spearman(a.abs(), b.abs())
    if similarity == "ssim":
        flat = a.flatten(1)
        constant = flat.amax(dim=1) == flat.amin(dim=1)
        return ssim(max_normalised(a), max_normalised(b)).where(~constant, torch.nan)

    def by_max(m: Tensor) -> Tensor:  # Quantus' normalise_by_max: an all-zero map stays as it is
        peak = m.abs().flatten(1).amax(dim=1).view(-1, *[1] * (m.dim() - 1))
        return m / peak.where(peak > 0, 1.0)

    return flat_ssim(by_max(a), by_max(b))


def other_classes(ids: Tensor, labels: Tensor, n_classes: int, seed: int) -> Tensor:
    """(B,) a class other than each label, uniform among the ``n_classes - 1`` others, a function of (seed, id)."""
    if n_classes < 2:
        raise ValueError(f"random_logit needs a model with at least 2 classes, got {n_classes}")
    u = hashed_uniform(ids.cpu(), (1,), seed=seed, stream=STREAM_RANDOM_LOGIT).squeeze(1)
    k = (u * (n_classes - 1)).floor().long().clamp(max=n_classes - 2).to(labels.device)
    return k + (k >= labels).long()


@dataclass(frozen=True)
class RandomLogitConfig:
    """``[random_logit]``: the suite's first ``max_samples`` samples (0: all) explained for a random other class,
    keyed by ``seed``, compared with ``similarity``."""

    similarity: str = "ssim"
    max_samples: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.similarity, "similarity", SIMILARITIES)
        for name in ("max_samples", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def evaluate_random_logit(unit: Unit, cfg: RandomLogitConfig) -> MetricResult:
    """Per sample: the similarity of its label's map and a random other class's."""
    x, labels, ids = unit.samples()
    first = unit.first_samples(cfg.max_samples)
    x, labels, ids = x[first.to(x.device)], labels[first.to(x.device)], ids[first]
    params = {**to_dict(cfg), "n_classes": unit.model.num_classes}
    if len(ids) == 0:
        return MetricResult.empty(params, "random_logit")
    maps = unit.sample_maps()[first.to(unit.device)]
    other = other_classes(ids, labels, unit.model.num_classes, cfg.seed)

    def explain() -> Tensor:
        chunks = in_chunks(
            lambda s, e: unit.explain(x[s:e], other[s:e], tag="random_logit"), len(x), unit.explain_batch
        )
        return torch.cat(chunks)

    again = unit.memo(("random_logit", cfg), lambda: unit.timed_explanation("random_logit", explain))
    values = map_similarity(maps, again, cfg.similarity)
    return MetricResult(values=values, undefined=values.isnan(), sample_ids=ids, params=params,
                        explained="random_logit")  # fmt: skip


def random_logit_cost(unit: Unit, cfg: RandomLogitConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and the first ``max_samples`` of them explained again for another class."""
    n = int(unit.first_samples(cfg.max_samples).sum())
    return (*sample_maps_cost(unit), MetricCost(("random_logit", cfg), explanations=n))


def evaluate_emprt(unit: Unit, cfg: RandomisationConfig) -> MetricResult:
    """Per sample: the entropy's rise from its trained map to its map at the cascade's end (every layer random)."""
    original, maps, _, ids, params = cascade_curves(unit, cfg)
    params = {**params, "n_bins": 100, "complexity": "histogram entropy"}
    if len(ids) == 0:
        return MetricResult.empty(params, "randomisation")
    rise, undefined = emprt(original, maps[-1])
    return MetricResult(values=rise, undefined=undefined, sample_ids=ids, params=params, explained="randomisation")


def emprt_cost(unit: Unit, cfg: RandomisationConfig) -> tuple[MetricCost, ...]:
    """The cascade's (shared with ``randomisation``)."""
    return cascade_cost(unit, cfg)


def noisy_copies(
    inputs: Tensor, ids: Tensor, *, n_noisy: int, magnitude: float, seed: int, real: Tensor | None = None
) -> Tensor:
    """(B, n_noisy, ...) sMPRT's copies of ``inputs`` (B, ...), the samples ``ids``: Gaussian noise of standard
    deviation ``magnitude`` times the sample's range, a function of (seed, sample id, copy, element), on all but the
    last copy (the input itself, as Quantus). ``real``: where the noise may land (broadcast over ``inputs``; a text
    model's real token positions), the range taken there; None: everywhere. Added in float64, then in the inputs'
    dtype.

    >>> import torch
    >>> from faithbench.metrics.sanity import noisy_copies
    >>> x = torch.tensor([[0.0, 2.0, 1.0]])
    >>> copies = noisy_copies(x, torch.tensor([7]), n_noisy=3, magnitude=0.1, seed=0)
    >>> copies.shape, torch.equal(copies[:, -1], x), bool((copies[:, 0] != x).all())
    (torch.Size([1, 3, 3]), True, True)
    """
    check_positive_int(n_noisy, "n_noisy")
    b, shape = inputs.shape[0], tuple(inputs.shape[1:])
    where = torch.ones_like(inputs, dtype=torch.bool) if real is None else (real != 0).expand_as(inputs)
    flat, inside = inputs.reshape(b, -1).double(), where.reshape(b, -1)
    span = flat.where(inside, -torch.inf).amax(dim=1) - flat.where(inside, torch.inf).amin(dim=1)
    std = (magnitude * span.where(inside.any(dim=1), 0.0)).view(b, 1, *[1] * len(shape))
    draws = hashed_normal(ids.cpu(), (n_noisy - 1, *shape), seed=seed, stream=STREAM_SMPRT).to(inputs.device)
    noise = torch.cat([draws * std * where.unsqueeze(1), draws.new_zeros((b, 1, *shape))], dim=1)
    return (inputs.double().unsqueeze(1) + noise).to(inputs.dtype)


@dataclass(frozen=True)
class SmoothMPRTConfig(RandomisationConfig):
    """``[smprt]``: the cascade's first ``n_samples`` samples, ``n_depths`` points, ``init`` and ``seed`` (as
    ``[randomisation]``); every map averaged over ``n_noisy`` copies of the input (Quantus' ``nr_samples``; its
    default is 50, ours 10 for a CPU budget) with Gaussian noise of ``noise_magnitude`` times the input's range
    (Quantus' default 0.1), the draws keyed by ``seed``; maps compared by ``similarity``."""

    n_noisy: int = 10
    noise_magnitude: float = 0.1
    similarity: str = "spearman"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.n_noisy, "n_noisy")
        m = self.noise_magnitude
        if isinstance(m, bool) or not isinstance(m, int | float) or not 0 <= m < float("inf"):
            raise ValueError(f"noise_magnitude must be a number >= 0 (0: no smoothing), got {m!r}")
        check_choice(self.similarity, "similarity", SMPRT_SIMILARITIES)


def smoothed_explainer(unit: Unit, cfg: SmoothMPRTConfig) -> BatchExplain:
    """The cascade's ``explain`` for sMPRT: every (sample, copy) row of :func:`noisy_copies` through the unit's method,
    ``explain_batch`` rows a call, then each sample's ``n_noisy`` maps averaged (float64)."""
    n = cfg.n_noisy

    def explain(inputs: Tensor, targets: Tensor, ids: Tensor, model: object, tag: str) -> Tensor:
        real = real_positions(unit, inputs)

        def rows(start: int, stop: int) -> Tensor:  # (sample, copy) rows start..stop, sample-major
            r = torch.arange(start, stop, device=inputs.device)
            first, last = start // n, (stop - 1) // n + 1
            copies = noisy_copies(inputs[first:last], ids[first:last], n_noisy=n, magnitude=cfg.noise_magnitude,
                                  seed=cfg.seed, real=None if real is None else real[first:last])  # fmt: skip
            sample = r // n
            return unit.explain(copies[sample - first, r % n], targets[sample], model=model, tag=f"smprt:{tag}")

        maps = torch.cat(in_chunks(rows, len(inputs) * n, unit.explain_batch))
        return maps.view(len(inputs), n, *maps.shape[1:]).double().mean(dim=1)

    return explain


def smprt_similarity(a: Tensor, b: Tensor, similarity: str, feature_mask: Tensor | None = None) -> Tensor:
    """(B,) sMPRT's ``similarity`` of smoothed maps ``a`` and ``b``: ``spearman`` of the |maps| (over the features of
    ``feature_mask``), ``ssim`` of the max-normalised |maps| ((B, H, W) only); NaN where undefined."""
    check_choice(similarity, "similarity", SMPRT_SIMILARITIES)
    if similarity == "spearman":
        return spearman(a.abs(), b.abs(), feature_mask)
    if a.dim() != 3:
        raise ValueError(f"similarity 'ssim' compares (B, H, W) image maps, got {tuple(a.shape)}; use 'spearman'")
    return map_similarity(a, b, "ssim")


def evaluate_smprt(unit: Unit, cfg: SmoothMPRTConfig) -> MetricResult:
    """Per sample: the mean over the cascade of the similarity of the smoothed trained and randomised maps."""
    if cfg.similarity == "ssim" and unit.model.modality != "image":
        raise ValueError(f"[smprt] similarity 'ssim' needs image maps; a {unit.model.modality} model: 'spearman'")
    original, maps, shares, ids, params = unit.memo(("smprt", cfg), lambda: unit.timed_explanation(
        "smprt", lambda: cascade_maps(unit, cfg, smoothed_explainer(unit, cfg))))  # fmt: skip
    params = {**params, "n_noisy": cfg.n_noisy, "noise_magnitude": cfg.noise_magnitude, "similarity": cfg.similarity}
    if len(ids) == 0:
        return MetricResult.empty(params, "smprt")
    mask = unit.sample_feature_mask()
    mask = None if mask is None else mask[: len(ids)]
    curve = torch.stack([smprt_similarity(original, m, cfg.similarity, mask) for m in maps], dim=1)  # (S, K)
    scores = CurveScores(values=curve.mean(dim=1), undefined=curve.isnan().any(dim=1), curve=curve, fractions=shares)
    return MetricResult.from_curve(scores, sample_ids=ids, params=params, explained="smprt")


def smprt_cost(unit: Unit, cfg: SmoothMPRTConfig) -> tuple[MetricCost, ...]:
    """The trained model and every depth of the cascade (counted as ``randomisation``'s cost counts them), each
    explaining the first ``n_samples`` samples' ``n_noisy`` copies, ``explain_batch`` rows a call."""
    k = int(unit.first_samples(cfg.n_samples).sum())
    models = cascade_cost(unit, cfg)[-1].passes + 1  # the cascade's depths and the trained model
    return (MetricCost(("smprt", cfg), explanations=k * cfg.n_noisy * models, passes=models),)


EMPRT = described("emprt", evaluate=evaluate_emprt, cost=emprt_cost, config=RandomisationConfig,
                  applies=not_applicable)  # fmt: skip
SMPRT = described("smprt", evaluate=evaluate_smprt, cost=smprt_cost, config=SmoothMPRTConfig, applies=not_applicable)
RANDOM_LOGIT = described("random_logit", evaluate=evaluate_random_logit, cost=random_logit_cost,
                         config=RandomLogitConfig)  # fmt: skip
