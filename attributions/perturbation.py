"""Perturbation methods over superpixels: LIME and Shapley value sampling (Captum).

Both explain the probability of the target (softmax, or sigmoid for B-cos models) as a function of
which image segments are present; absent segments take ``baseline`` (default 0 in model-input
space, on every channel, so both halves of a B-cos [x, 1 - x] pair go together). Segments come from
the decoded image: ``quickshift`` (LIME's default: kernel 4, max_dist 200, ratio 0.2, as TPAMI's
code), ``slic`` or a square grid of ``patches``. Maps hold each segment's value on its pixels.
Sampling is seeded per sample, so a map does not depend on the rest of the batch.
"""

from __future__ import annotations

from typing import ClassVar

import captum.attr as ca
import numpy as np
import torch
from captum._utils.models.linear_model import SkLearnRidge
from captum.attr._core.lime import get_exp_kernel_similarity_function
from torch import Tensor

from attributions.base import AttributionMethod, Capabilities, seeded
from faithbench.errors import ParameterError, check_choice
from models.adapter import ModelAdapter

SEGMENTATIONS = ("quickshift", "slic", "patches")


def segment(images: Tensor, method: str, **params: float) -> Tensor:
    """Integer segment maps (B, H, W), labels 0..K-1 per image, from images (B, C, H, W) in [0, 1]."""
    check_choice(method, "segmentation", SEGMENTATIONS)
    b, c, h, w = images.shape
    if method == "patches":
        grid = int(params.get("grid", 7))
        rows = torch.arange(h, device=images.device) * grid // h
        cols = torch.arange(w, device=images.device) * grid // w
        return (rows.view(h, 1) * grid + cols.view(1, w)).expand(b, h, w).clone()
    from skimage.segmentation import quickshift, slic

    out = []
    for img in images.detach().cpu().double().permute(0, 2, 3, 1).numpy():
        if method == "quickshift":
            rgb = img if c == 3 else np.repeat(img[..., :1], 3, axis=-1)
            seg = quickshift(
                rgb,
                kernel_size=params.get("kernel_size", 4),
                max_dist=params.get("max_dist", 200),
                ratio=params.get("ratio", 0.2),
                convert2lab=True,
                rng=0,
            )
        else:
            seg = slic(
                img,
                n_segments=int(params.get("n_segments", 50)),
                compactness=params.get("compactness", 10.0),
                channel_axis=-1,
                start_label=0,
            )
        out.append(np.unique(seg, return_inverse=True)[1].reshape(h, w))
    return torch.from_numpy(np.stack(out)).to(images.device)


class _SegmentMethod(AttributionMethod):
    """LIME and Shapley sampling: the same Captum call over a segment mask, one seeded sample at a time."""

    capabilities = Capabilities(batchable=False, seeded=True)
    choices: ClassVar[dict] = {"segmentation": SEGMENTATIONS}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        seg_params = self.params["segmentation_params"]
        if seg_params is not None and not isinstance(seg_params, dict):
            raise ParameterError(
                f"method {self.name!r} parameter segmentation_params must be a table, got {seg_params!r}"
            )

    def _segments(self, model: ModelAdapter, inputs: Tensor) -> Tensor:
        return segment(
            model.encoding.decode(inputs).clamp(0, 1),
            self.params["segmentation"],
            **(self.params["segmentation_params"] or {}),
        )

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        segments = self._segments(model, inputs)
        explainer = self._explainer(lambda x: model.probabilities(model.module(x)))
        p = self.params
        maps = []
        for i in range(inputs.shape[0]):  # seeded per sample: a map never depends on the rest of the batch
            seg = segments[i]
            with seeded(p["seed"], inputs.device):
                out = explainer.attribute(
                    inputs[i : i + 1],
                    baselines=p["baseline"],
                    target=targets[i : i + 1],
                    feature_mask=seg.view(1, 1, *seg.shape),
                    n_samples=p["n_samples"],
                    perturbations_per_eval=p["perturbations_per_eval"],
                    **self._attribute_kwargs(),
                )
            maps.append(self._to_map(out, seg))
        return torch.stack(maps).to(inputs.dtype)

    def _explainer(self, forward):
        raise NotImplementedError

    def _attribute_kwargs(self) -> dict:
        return {}

    def _to_map(self, out: Tensor, seg: Tensor) -> Tensor:
        """The (H, W) map from Captum's output for one input with segment map ``seg``."""
        raise NotImplementedError


class Lime(_SegmentMethod):
    name = "lime"
    description = "Captum LIME on superpixels (ridge surrogate, exp. cosine kernel 0.25 as the lime package)"
    defaults: ClassVar[dict] = {
        "n_samples": 500,
        "segmentation": "quickshift",
        "segmentation_params": None,
        "output": "weights",
        "top_k": 5,
        "baseline": 0.0,
        "kernel_width": 0.25,
        "perturbations_per_eval": 64,
        "seed": 0,
    }
    choices: ClassVar[dict] = {**_SegmentMethod.choices, "output": ("weights", "top_k_mask")}

    def _explainer(self, forward):
        return ca.Lime(
            forward,
            interpretable_model=SkLearnRidge(alpha=1.0),
            similarity_func=get_exp_kernel_similarity_function("cosine", self.params["kernel_width"]),
        )

    def _attribute_kwargs(self) -> dict:
        return {"return_input_shape": False}

    def _to_map(self, out: Tensor, seg: Tensor) -> Tensor:
        weights = out[0]
        if self.params["output"] == "top_k_mask":  # TPAMI: binary mask of the top-k positive superpixels
            keep = torch.zeros_like(weights)
            top = weights.topk(min(self.params["top_k"], weights.numel())).indices
            keep[top] = (weights[top] > 0).to(weights.dtype)
            weights = keep
        return weights.to(seg.device)[seg]  # the surrogate's weights come back on the host


class ShapleySampling(_SegmentMethod):
    name = "shapley_sampling"
    description = "Captum ShapleyValueSampling over image segments (default a 7 x 7 grid of patches)"
    defaults: ClassVar[dict] = {
        "n_samples": 25,
        "segmentation": "patches",
        "segmentation_params": None,
        "baseline": 0.0,
        "perturbations_per_eval": 64,
        "seed": 0,
    }

    def _explainer(self, forward):
        return ca.ShapleyValueSampling(forward)

    def _to_map(self, out: Tensor, seg: Tensor) -> Tensor:
        return out[0, 0]  # every channel of a segment carries the segment's value
