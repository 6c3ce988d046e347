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


@dataclass(frozen=True)
class CamScoreConfig:
    """``[cam_scores]``, shared by ``average_drop`` and ``increase_in_confidence``: where the mask multiplies."""

    space: str = "image"

    def __post_init__(self) -> None:
        check_choice(self.space, "space", SPACES)


def unit_terms(unit: Unit, cfg: CamScoreConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(S,) drop and increase terms of this piece's samples and (S,) undefined, once per unit for both metrics."""

    def compute() -> tuple[Tensor, Tensor, Tensor]:
        x, labels, ids = unit.samples()
        base = unit.images[ids].to(unit.device) if cfg.space == "image" else x
        mask, empty = positive_mask(unit.sample_maps(), tuple(base.shape[-2:]))
        forward, act = unit.forward, unit.model.activation
        key = call_key(forward, tuple(x.shape[1:]), "without")

        def probability(inputs: Callable[[int, int], Tensor]) -> Tensor:
            def rows(s: int, e: int) -> Tensor:
                with torch.no_grad():
                    p = to_probabilities(forward(inputs(s, e)), act)
                return p.gather(1, labels[s:e].view(-1, 1)).squeeze(1)

            return torch.cat(in_chunks(rows, len(ids), unit.eval_batch, key=key))

        y = unit.per_model(("probability", "samples", act), lambda: probability(lambda s, e: x[s:e]))

        def masked(s: int, e: int) -> Tensor:
            out = base[s:e] * mask[s:e]
            return unit.model.encode(out) if cfg.space == "image" else out

        drop, increase = drop_and_increase(y, probability(masked))
        return drop, increase, empty

    return unit.memo(("cam_scores", cfg), compute)


def _evaluate(which: int) -> Callable[[Unit, CamScoreConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: CamScoreConfig) -> MetricResult:
        _, _, ids = unit.samples()
        params = {**to_dict(cfg), "mask": "positive part / its max", "readout": unit.model.activation}
        if len(ids) == 0:
            return MetricResult.empty(params, "samples")
        terms = unit_terms(unit, cfg)
        values = terms[which].where(~terms[2], torch.nan)
        return MetricResult(values=values, undefined=terms[2], sample_ids=ids, params=params, explained="samples")

    return evaluate


def cost(unit: Unit, cfg: CamScoreConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps, the samples' probabilities (once per model) and each masked sample's."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit), MetricCost(("probability", "samples"), inputs=n, scope="model"),
            MetricCost(("cam_scores", cfg), inputs=n))  # fmt: skip


AVERAGE_DROP = described("average_drop", evaluate=_evaluate(0), cost=cost, config=CamScoreConfig)
INCREASE_IN_CONFIDENCE = described("increase_in_confidence", evaluate=_evaluate(1), cost=cost, config=CamScoreConfig)
