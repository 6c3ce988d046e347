"""Average Drop and Increase in Confidence (Chattopadhyay et al., WACV 2018: Grad-CAM++; torch-cam's table): the
image seen through its map. The map's positive part, scaled to [0, 1] per image, multiplies the image (every channel
of a pixel by that pixel's weight), and the explained class's probability ``O`` on the masked image is compared with
``Y`` on the image itself::

    m = max(a, 0) / max(max(a, 0))                  (bilinear to the image's size when smaller)
    average_drop = 100 * max(0, Y - O) / Y          lower is better (the map keeps what the class needs)
    increase_in_confidence = 100 * [O > Y]          higher is better (the mean over samples: the share, in %)

``Y`` and ``O`` are the model's probability of the class (its own activation: softmax, or sigmoid for the B-cos
models). The mask multiplies the image in [0, 1] (``space = "image"``: every model family sees the same masked
image, then its encoding reads it; a masked pixel turns black) or what the model reads (``space = "model-input"``,
torch-cam's convention). A map with no positive entry keeps nothing of the image: it is undefined.

**ADCC** (Poppi et al., CVPRW 2021; reference code aimagelab/ADCC): the harmonic mean of three scores of the same mask
``m`` (as above, at the image's size), each in [0, 1]::

    coherency = (pearson(m, m') + 1) / 2      m': the mask of the method's map of the masked input, same class
    complexity = mean over pixels of m        the L1 norm of the [0, 1] map per pixel
    adcc = 3 / (1 / coherency + 1 / (1 - complexity) + 1 / (1 - average_drop / 100))     higher is better

A component at its worst (coherency 0, complexity 1, a drop of 100 %) makes ADCC 0. The masked input is the one
Average Drop reads (``space`` chooses it); it is explained once more per sample (``explain_batch`` at a time) for
the sample's own class. ``adcc_coherency`` and ``adcc_complexity`` report two of the components. Undefined: a
sample whose mask is empty (complexity, coherency, ADCC) or whose ``m`` or ``m'`` is constant (coherency, ADCC: no
correlation; the reference code scores such a sample 0 or NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.activations import to_probabilities
from faithbench.calls import call_key, in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described

SPACES = ("image", "model-input")


def positive_mask(maps: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """(B, 1, H, W) the maps' positive part scaled to [0, 1] per map (bilinear to ``size`` where it differs) and (B,)
    whether a map has no positive entry.

    >>> import torch
    >>> from faithbench.metrics.cam_scores import positive_mask
    >>> mask, empty = positive_mask(torch.tensor([[[2.0, -1.0], [1.0, 0.0]]]), (2, 2))
    >>> mask.flatten().tolist(), empty.tolist()
    ([1.0, 0.0, 0.5, 0.0], [False])
    """
    pos = maps.clamp(min=0).unsqueeze(1).float()
    if tuple(pos.shape[-2:]) != tuple(size):
        pos = F.interpolate(pos, size=size, mode="bilinear", align_corners=False)
    peak = pos.flatten(1).amax(dim=1)
    return pos / peak.where(peak > 0, 1.0).view(-1, 1, 1, 1), peak <= 0


def drop_and_increase(before: Tensor, after: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) Average Drop's and Increase in Confidence's per-sample terms, in %, from the class's probability
    ``before`` (Y) and ``after`` (O) the masking.

    >>> import torch
    >>> from faithbench.metrics.cam_scores import drop_and_increase
    >>> drop, increase = drop_and_increase(torch.tensor([0.8, 0.5]), torch.tensor([0.6, 0.7]))
    >>> drop.round(decimals=4).tolist(), increase.tolist()
    ([25.0, 0.0], [0.0, 100.0])
    """
    y, o = before.double(), after.double()
    return 100 * (y - o).clamp(min=0) / y, 100 * (o > y).double()


def mask_coherency(before: Tensor, after: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) float64 ADCC's coherency of the masks ``before`` (of the image) and ``after`` (of the image masked by
    ``before``), (B, ...) each: their Pearson correlation over the pixels rescaled to [0, 1], ``(r + 1) / 2``, and
    (B,) undefined where either mask is constant (no correlation: NaN there).

    >>> import torch
    >>> from faithbench.metrics.cam_scores import mask_coherency
    >>> before = torch.tensor([[0.0, 0.5, 1.0, 0.5], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    >>> after = torch.tensor([[0.0, 0.2, 0.4, 0.2], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    >>> mask_coherency(before, after)  # the same shape scaled; the opposite; nothing kept
    (tensor([1., 0., nan], dtype=torch.float64), tensor([False, False,  True]))
    """
    a, b = before.flatten(1).double(), after.flatten(1).double()
    constant = (a.amax(dim=1) == a.amin(dim=1)) | (b.amax(dim=1) == b.amin(dim=1))
    a, b = a - a.mean(dim=1, keepdim=True), b - b.mean(dim=1, keepdim=True)
    norms = torch.linalg.vector_norm(a, dim=1) * torch.linalg.vector_norm(b, dim=1)
    r = ((a * b).sum(dim=1) / norms.where(~constant, 1.0)).clamp(-1, 1)
    return ((r + 1) / 2).where(~constant, torch.nan), constant


def mask_complexity(mask: Tensor) -> Tensor:
    """(B,) float64 ADCC's complexity of masks in [0, 1], (B, ...): the mean of their entries (the L1 norm per
    pixel).

    >>> import torch
    >>> from faithbench.metrics.cam_scores import mask_complexity
    >>> mask_complexity(torch.tensor([[[1.0, 0.5], [0.5, 0.0]], [[1.0, 0.0], [0.0, 0.0]]]))
    tensor([0.5000, 0.2500], dtype=torch.float64)
    """
    return mask.flatten(1).double().mean(dim=1)


def adcc(coherency: Tensor, complexity: Tensor, drop: Tensor) -> Tensor:
    """(B,) float64 ADCC: the harmonic mean of ``coherency``, ``1 - complexity`` and ``1 - drop``, each in [0, 1]
    (``drop``: Average Drop's term as a fraction, not in %); 0 where any of the three is 0.

    >>> import torch
    >>> from faithbench.metrics.cam_scores import adcc
    >>> adcc(torch.tensor([0.5, 0.9, 0.0]), torch.tensor([0.5, 0.1, 0.1]), torch.tensor([0.0, 0.1, 0.1]))
    tensor([0.6000, 0.9000, 0.0000], dtype=torch.float64)
    """
    parts = torch.stack([coherency.double(), 1 - complexity.double(), 1 - drop.double()])
    return 3 / parts.reciprocal().sum(dim=0)  # a part of 0: its reciprocal is inf, the mean 0


@dataclass(frozen=True)
class CamScoreConfig:
    """``[cam_scores]``, shared by ``average_drop``, ``increase_in_confidence`` and the ADCC metrics: where the mask
    multiplies (ADCC's re-explained input is that masked input too)."""

    space: str = "image"

    def __post_init__(self) -> None:
        check_choice(self.space, "space", SPACES)


def unit_mask(unit: Unit, cfg: CamScoreConfig) -> tuple[Tensor, Tensor]:
    """(S, 1, H, W) the masks of this piece's samples at the size of what they multiply and (S,) whether a mask is
    empty, once per unit."""

    def compute() -> tuple[Tensor, Tensor]:
        x, _, _ = unit.samples()
        size = unit.images.shape[-2:] if cfg.space == "image" else x.shape[-2:]
        return positive_mask(unit.sample_maps(), tuple(size))

    return unit.memo(("cam_mask", cfg), compute)


def masked_samples(unit: Unit, cfg: CamScoreConfig) -> Callable[[int, int], Tensor]:
    """The model's inputs of this piece's samples ``s:e`` seen through their masks (in ``cfg.space``)."""
    x, _, ids = unit.samples()
    base = unit.images[ids].to(unit.device) if cfg.space == "image" else x
    mask, _ = unit_mask(unit, cfg)

    def masked(s: int, e: int) -> Tensor:
        out = base[s:e] * mask[s:e]
        return unit.model.encode(out) if cfg.space == "image" else out

    return masked


def unit_terms(unit: Unit, cfg: CamScoreConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(S,) drop and increase terms of this piece's samples and (S,) undefined, once per unit for both metrics."""

    def compute() -> tuple[Tensor, Tensor, Tensor]:
        x, labels, ids = unit.samples()
        _, empty = unit_mask(unit, cfg)
        forward, act = unit.forward, unit.model.activation
        key = call_key(forward, tuple(x.shape[1:]), "without")

        def probability(inputs: Callable[[int, int], Tensor]) -> Tensor:
            def rows(s: int, e: int) -> Tensor:
                with torch.no_grad():
                    p = to_probabilities(forward(inputs(s, e)), act)
                return p.gather(1, labels[s:e].view(-1, 1)).squeeze(1)

            return torch.cat(in_chunks(rows, len(ids), unit.eval_batch, key=key))

        y = unit.per_model(("probability", "samples", act), lambda: probability(lambda s, e: x[s:e]))
        drop, increase = drop_and_increase(y, probability(masked_samples(unit, cfg)))
        return drop, increase, empty

    return unit.memo(("cam_scores", cfg), compute)


def unit_coherency(unit: Unit, cfg: CamScoreConfig) -> tuple[Tensor, Tensor]:
    """(S,) ADCC's coherency of this piece's samples and (S,) undefined, once per unit: each masked sample explained
    again for its label, ``explain_batch`` at a time (timed as ``adcc``)."""

    def compute() -> tuple[Tensor, Tensor]:
        _, labels, ids = unit.samples()
        mask, _ = unit_mask(unit, cfg)
        masked = masked_samples(unit, cfg)

        def explain() -> Tensor:
            again = in_chunks(lambda s, e: unit.explain(masked(s, e), labels[s:e], tag="adcc"), len(ids),
                              unit.explain_batch)  # fmt: skip
            return torch.cat(again)

        maps = unit.timed_explanation("adcc", explain)
        return mask_coherency(mask, positive_mask(maps, tuple(mask.shape[-2:]))[0])

    return unit.memo(("adcc", cfg), compute)


def _evaluate(which: int) -> Callable[[Unit, CamScoreConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: CamScoreConfig) -> MetricResult:
        _, _, ids = unit.samples()
        params = _params(unit, cfg)
        if len(ids) == 0:
            return MetricResult.empty(params, "samples")
        terms = unit_terms(unit, cfg)
        values = terms[which].where(~terms[2], torch.nan)
        return MetricResult(values=values, undefined=terms[2], sample_ids=ids, params=params, explained="samples")

    return evaluate


def _params(unit: Unit, cfg: CamScoreConfig) -> dict:
    return {**to_dict(cfg), "mask": "positive part / its max", "readout": unit.model.activation}


def evaluate_adcc(unit: Unit, cfg: CamScoreConfig) -> MetricResult:
    """Per sample: the harmonic mean of its coherency, 1 - complexity and 1 - Average Drop (as a fraction)."""
    _, _, ids = unit.samples()
    params = {**_params(unit, cfg), "coherency": "(pearson + 1) / 2", "complexity": "mean of the mask"}
    if len(ids) == 0:
        return MetricResult.empty(params, "adcc")
    mask, empty = unit_mask(unit, cfg)
    coherency, flat = unit_coherency(unit, cfg)
    values = adcc(coherency, mask_complexity(mask), unit_terms(unit, cfg)[0] / 100)
    undefined = empty | flat | values.isnan()
    values = values.where(~undefined, torch.nan)
    return MetricResult(values=values, undefined=undefined, sample_ids=ids, params=params, explained="adcc")


def evaluate_coherency(unit: Unit, cfg: CamScoreConfig) -> MetricResult:
    """Per sample: ADCC's coherency, the correlation of its mask and its masked image's mask, in [0, 1]."""
    _, _, ids = unit.samples()
    params = {**_params(unit, cfg), "coherency": "(pearson + 1) / 2"}
    if len(ids) == 0:
        return MetricResult.empty(params, "adcc")
    values, undefined = unit_coherency(unit, cfg)
    return MetricResult(values=values, undefined=undefined, sample_ids=ids, params=params, explained="adcc")


def evaluate_complexity(unit: Unit, cfg: CamScoreConfig) -> MetricResult:
    """Per sample: ADCC's complexity, the mean of its mask."""
    _, _, ids = unit.samples()
    params = {**_params(unit, cfg), "complexity": "mean of the mask"}
    if len(ids) == 0:
        return MetricResult.empty(params, "samples")
    mask, empty = unit_mask(unit, cfg)
    values = mask_complexity(mask).where(~empty, torch.nan)
    return MetricResult(values=values, undefined=empty, sample_ids=ids, params=params, explained="samples")


def cost(unit: Unit, cfg: CamScoreConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps, the samples' probabilities (once per model) and each masked sample's."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit), MetricCost(("probability", "samples"), inputs=n, scope="model"),
            MetricCost(("cam_scores", cfg), inputs=n))  # fmt: skip


def coherency_cost(unit: Unit, cfg: CamScoreConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and each masked sample explained again."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit), MetricCost(("adcc", cfg), explanations=n))


def adcc_cost(unit: Unit, cfg: CamScoreConfig) -> tuple[MetricCost, ...]:
    """Average Drop's and each masked sample explained again."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*cost(unit, cfg), MetricCost(("adcc", cfg), explanations=n))


def complexity_cost(unit: Unit, cfg: CamScoreConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps."""
    return sample_maps_cost(unit)


AVERAGE_DROP = described("average_drop", evaluate=_evaluate(0), cost=cost, config=CamScoreConfig)
INCREASE_IN_CONFIDENCE = described("increase_in_confidence", evaluate=_evaluate(1), cost=cost, config=CamScoreConfig)
ADCC = described("adcc", evaluate=evaluate_adcc, cost=adcc_cost, config=CamScoreConfig)
ADCC_COHERENCY = described("adcc_coherency", evaluate=evaluate_coherency, cost=coherency_cost, config=CamScoreConfig)
ADCC_COMPLEXITY = described("adcc_complexity", evaluate=evaluate_complexity, cost=complexity_cost,
                            config=CamScoreConfig)  # fmt: skip
