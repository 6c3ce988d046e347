"""The newer sanity checks beside the cascading randomisation (:mod:`faithbench.metrics.randomisation`).

**eMPRT** (efficient model-parameter randomisation, Hedström et al., TMLR 2024): a map of a fully randomised model
should be more complex than the trained model's. With ``H`` the discrete entropy of a map's values in a 100-bin
histogram (Quantus' ``discrete_entropy``: ``np.histogram`` over the map's range, natural log)::

    emprt = (H(a_random) - H(a)) / H(a)        higher is better (0: randomising the model changed nothing)

``a_random`` is the map at the last point of the ``[randomisation]`` cascade, where every parameterised layer is
re-initialised, so it shares that table and its re-explanations (the same first ``n_samples`` samples; ``init``
``default`` is Quantus' ``reset_parameters``). A sample whose trained map has ``H = 0`` (constant) is undefined.

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
from faithbench.metrics.imputation import hashed_uniform
from faithbench.metrics.randomisation import (
    RandomisationConfig,
    cascade_curves,
    max_normalised,
    not_applicable,
    spearman,
    ssim,
)
from faithbench.metrics.randomisation import cost as cascade_cost
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described

STREAM_RANDOM_LOGIT = 5  # the keyed draws' stream (imputation: 1, 2; robustness: 3; infidelity: 4)
SIMILARITIES = ("ssim", "spearman", "quantus-ssim")


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


EMPRT = described("emprt", evaluate=evaluate_emprt, cost=emprt_cost, config=RandomisationConfig,
                  applies=not_applicable)  # fmt: skip
RANDOM_LOGIT = described("random_logit", evaluate=evaluate_random_logit, cost=random_logit_cost,
                         config=RandomLogitConfig)  # fmt: skip
