"""What removed pixels become in deletion, insertion and comprehensiveness/sufficiency.

The baseline is defined in *image space* (images in [0, 1]) and then encoded the way each model
encodes its input, so that every model family sees the same change of the image: a mean/std
normalised model and a B-cos [x, 1 - x] model both see a pixel turn into, say, the data set's mean
colour. Kinds:

* ``mean``  -- the per-channel mean colour of the evaluation images (default);
* ``value`` -- a constant pixel value ``value`` (0 = black);
* ``blur``  -- the image itself, Gaussian-blurred with sigma = ``blur_sigma`` x image side
  (0.045 gives sigma 10 px at 224 px, Fong & Vedaldi's blur);
* ``model-input-zero`` -- 0 in model-input space (ALOE's code): grey for a normalised model, the
  impossible [0, 0] pair for a B-cos model, grey again after a B-cosified model's layer 0. Kept
  to reproduce that code; it compares unlike image changes across model families.
* ``per-image-mean`` -- deletion only: Quantus' ``perturb_baseline="mean"``. Each step of the curve sets the
  features it removes to the mean of the image *as it stands before that step* (every channel and pixel of the
  model input, earlier removals included), so the value drifts step by step (:func:`running_mean_baseline`).
  Kept to reproduce Quantus' PixelFlipping / RegionPerturbation; like ``model-input-zero`` it is a model-input
  value, not an image-space one.

Text models replace tokens: ``mask-token`` (the B-cos LM code's default: removed tokens become [MASK], still
attended) or ``pad-token`` (removed tokens become padding: they drop out of attention, unlike the B-cos LM
code's ``pad``, which attends to them). Each is encoded per model, position by position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor
from torchvision.transforms.functional import gaussian_blur

from faithbench.metrics._checks import check_choice
from faithbench.metrics.spec import Unit

IMAGE_BASELINES = ("mean", "value", "blur")  # have an image-space form
TEXT_BASELINES = ("mask-token", "pad-token")  # what a removed token becomes in a text model
PER_IMAGE_MEAN = "per-image-mean"  # Quantus' "mean": a removal sequence's own running mean (deletion only)
BASELINES = (*IMAGE_BASELINES, "model-input-zero", *TEXT_BASELINES)


def check_baseline(kind: str, value: float, blur_sigma: float, choices: tuple[str, ...] = BASELINES) -> None:
    """A baseline kind among ``choices``, a pixel value in [0, 1] and a positive blur sigma."""
    check_choice(kind, "baseline", choices)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"baseline_value must be a pixel value in [0, 1], got {value}")
    if not blur_sigma > 0:
        raise ValueError(f"blur_sigma must be > 0 (a fraction of the image side), got {blur_sigma}")


def running_mean_baseline(inputs: Tensor, ranks: Tensor, steps: Tensor) -> Tensor:
    """Quantus' ``mean`` baseline along a removal sequence, as one per-sample replacement (B, C, H, W).

    Features are removed in steps: step j removes the features of rank in [k_{j-1}, k_j) (``steps``: the k_j,
    cumulative, k_0 = 0 implied) and sets them to m_{j-1}, the mean over all N = C * H * W values of the image after
    step j-1 (m_0: the input's own mean). As removed features held their original values until then,

        m_j = m_{j-1} + (C * |R_j| * m_{j-1} - S_j) / N,   S_j = sum of the inputs over R_j and every channel,

    a recurrence over steps, batched over samples. Each feature's value here is the one its step gives it, so
    replacing the top k_j features by this tensor yields the image after step j of Quantus' loop. Features never
    removed hold the last mean (unused by deletion).

    Args:
        inputs: (B, C, H, W) model inputs.
        ranks: (B, H, W) feature ranks, 0 removed first (all channels of a pixel together).
        steps: (r,) the k of each point of the curve, non-decreasing.

    Example:
        >>> import torch
        >>> from faithbench.metrics.baselines import running_mean_baseline
        >>> x = torch.tensor([[[[4.0, 0.0], [0.0, 0.0]]]])  # mean 1
        >>> ranks = torch.tensor([[[0, 1], [2, 3]]])
        >>> running_mean_baseline(x, ranks, torch.tensor([0, 1, 2, 4])).flatten()  # [1, 0, 0, 0]: mean 1/4; then 5/16
        tensor([1.0000, 0.2500, 0.3125, 0.3125])
    """
    b, c = inputs.shape[:2]
    x = inputs.double()
    edges = torch.unique(steps.to(ranks.device))
    edges = edges[edges > 0]
    step = torch.bucketize(ranks, edges, right=True).reshape(b, -1)  # step j removes ranks in [k_{j-1}, k_j)
    buckets = len(edges) + 1
    sums = torch.zeros(b, buckets, dtype=x.dtype, device=x.device).scatter_add_(1, step, x.sum(dim=1).reshape(b, -1))
    counts = torch.zeros_like(sums).scatter_add_(1, step, torch.full_like(sums[:, :1], c).expand_as(step))
    n = x[0].numel()
    means = [x.reshape(b, -1).mean(dim=1)]
    for j in range(len(edges)):  # steps, not samples: a handful per curve
        means.append(means[-1] + (counts[:, j] * means[-1] - sums[:, j]) / n)
    value = torch.stack(means, dim=1).gather(1, step).reshape(b, 1, *ranks.shape[1:])
    return value.to(inputs.dtype).expand_as(inputs).contiguous()


def image_baseline(images: Tensor, kind: str, *, value: float = 0.0, blur_sigma: float = 0.045) -> Tensor:
    """The baseline image(s) in [0, 1] for ``images`` (B, c, H, W) in [0, 1].

    Returns (1, c, 1, 1) for ``mean`` and ``value`` (the same for every sample) and (B, c, H, W)
    for ``blur``. ``model-input-zero`` has no image-space form (see :func:`removal_baseline`).
    """
    check_baseline(kind, value, blur_sigma, IMAGE_BASELINES)
    if images.dim() != 4:
        raise ValueError(f"images must be (B, c, H, W) in [0, 1], got shape {tuple(images.shape)}")
    if kind == "mean":
        return images.mean(dim=(0, 2, 3), keepdim=True)
    if kind == "value":
        return torch.full((1, images.shape[1], 1, 1), float(value), dtype=images.dtype, device=images.device)
    sigma = blur_sigma * max(images.shape[-2:])
    size = 2 * math.ceil(3 * sigma) + 1  # +-3 sigma
    size = min(size, 2 * (min(images.shape[-2:]) // 2) - 1)  # torchvision: kernel smaller than the image
    return gaussian_blur(images, [size, size], [sigma, sigma])


def removal_baseline(
    encode: Callable[[Tensor], Tensor],
    images: Tensor,
    all_images: Tensor,
    kind: str,
    *,
    value: float = 0.0,
    blur_sigma: float = 0.045,
) -> Tensor | float:
    """The baseline in model-input space for the samples ``images`` (B, c, H, W) in [0, 1].

    ``encode`` maps images to model input; ``all_images`` are the evaluation images (the ``mean``
    colour is theirs, so it is the same for every model and every shard). Returns a tensor
    broadcastable to the encoded samples ((1, C, 1, 1), or (B, C, H, W) per sample), or 0.0 for
    ``model-input-zero``.

    Example:
        >>> import torch
        >>> from faithbench.metrics.baselines import removal_baseline
        >>> images = torch.stack([torch.zeros(1, 2, 2), torch.ones(1, 2, 2)])
        >>> removal_baseline(lambda x: x, images[:1], images, "mean").flatten()  # the data set's mean colour, encoded
        tensor([0.5000])
        >>> removal_baseline(lambda x: x, images[:1], images, "value", value=0.25).flatten()
        tensor([0.2500])
    """
    check_choice(kind, "baseline", BASELINES)
    if kind == "model-input-zero":
        return 0.0
    source = all_images if kind == "mean" else images
    return encode(image_baseline(source, kind, value=value, blur_sigma=blur_sigma))


@dataclass(frozen=True)
class BaselineConfig:
    """The baseline parameters shared by the ``[deletion]`` and ``[erasure]`` tables."""

    baseline: str = "mean"  # mean | value | blur | model-input-zero; text: mask-token | pad-token (metrics.baselines)
    baseline_value: float = 0.0  # pixel value in [0, 1] for baseline = "value"
    blur_sigma: float = 0.045  # Gaussian sigma as a fraction of the image side, for baseline = "blur"

    baselines: ClassVar[tuple[str, ...]] = BASELINES  # the kinds this table takes

    def __post_init__(self) -> None:
        check_baseline(self.baseline, self.baseline_value, self.blur_sigma, self.baselines)


def unit_baseline(unit: Unit, cfg: BaselineConfig, ids: Tensor) -> Tensor | float | str:
    """The removal baseline of the unit's samples ``ids``, in the unit's model-input space, on its device."""
    text = unit.model.modality == "text"
    if text != (cfg.baseline in TEXT_BASELINES):
        valid = TEXT_BASELINES if text else (*IMAGE_BASELINES, "model-input-zero")
        raise ValueError(
            f"baseline {cfg.baseline!r} does not apply to {unit.model.modality} model {unit.model.name!r}; "
            f"valid: {', '.join(valid)}"
        )
    if cfg.baseline == PER_IMAGE_MEAN:
        return PER_IMAGE_MEAN  # computed by the curve from its own removal sequence
    if text:
        token = cfg.baseline.removesuffix("-token")
        return unit.model.encode(unit.model.encoding.masked(unit.images[ids.cpu()], token)).to(unit.device)
    base = removal_baseline(
        unit.model.encode,
        unit.images[ids.cpu()],
        unit.images,
        cfg.baseline,
        value=cfg.baseline_value,
        blur_sigma=cfg.blur_sigma,
    )
    return base.to(unit.device) if isinstance(base, Tensor) else base
