"""Perturbation methods over superpixels: LIME and Shapley value sampling (Captum's sampling, batched).

Both explain the probability of the target (softmax, or sigmoid for B-cos models) as a function of
which image segments are present; absent segments take ``baseline`` (default 0 in model-input
space, on every channel, so both halves of a B-cos [x, 1 - x] pair go together). Segments come from
the decoded image: ``quickshift`` (LIME's default: kernel 4, max_dist 200, ratio 0.2, as TPAMI's
code), ``slic`` or a square grid of ``patches``; ``auto`` (LIME's default here) is quickshift on images of at least
64 px a side and slic below (quickshift finds 1-2 segments on a 28 px digit). Maps hold each segment's value on its
pixels.
Sampling is seeded per sample, so a map does not depend on the rest of the batch; the perturbations
of all samples share model calls of at most ``max_batch`` inputs (:mod:`faithbench.attributions.sampling`).
On text every token is a segment ([CLS] and [SEP] one more, :func:`token_segments`), and an absent token
is 0: it drops out of attention (:mod:`faithbench.models.text_encoding`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from faithbench.attributions.base import AttributionMethod, Capabilities
from faithbench.attributions.sampling import ScoreFn, lime_weights, segment_maps, shapley_sampling_values, top_k_mask
from faithbench.calls import name_calls
from faithbench.errors import ParameterError, check_choice
from faithbench.models.adapter import ModelAdapter

SEGMENTATIONS = ("auto", "quickshift", "slic", "patches")
QUICKSHIFT_MIN_SIDE = 64  # ``auto``: quickshift from this image side (px) up, slic below


def resolve_segmentation(method: str, height: int, width: int) -> str:
    """``auto`` resolved for an image of ``height`` x ``width`` px; any other segmentation as given."""
    if method != "auto":
        return method
    return "quickshift" if min(height, width) >= QUICKSHIFT_MIN_SIDE else "slic"


def segment(images: Tensor, method: str, **params: float) -> Tensor:
    """Integer segment maps (B, H, W), labels 0..K-1 per image, from images (B, C, H, W) in [0, 1]."""
    check_choice(method, "segmentation", SEGMENTATIONS)
    b, c, h, w = images.shape
    method = resolve_segmentation(method, h, w)
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


def token_segments(embedded: Tensor) -> Tensor:
    """Segments (B, T) of text inputs (B, D, T) laid out ``[CLS] tokens [SEP]`` + zero padding: every token its
    own segment 0..n-1, and [CLS], [SEP] and the padding together one more segment n (absent: the model sees
    no special token either; padding is 0 either way)."""
    present = embedded.ne(0).any(dim=1)
    length = present.sum(dim=1, keepdim=True)  # tokens + [CLS] + [SEP]
    pos = torch.arange(embedded.shape[2], device=embedded.device).unsqueeze(0)
    content = (pos >= 1) & (pos < length - 1)
    return torch.where(content, pos - 1, (length - 2).clamp(min=0))


class _SegmentMethod(AttributionMethod):
    """LIME and Shapley sampling over a segment mask: every sample's perturbations batched across samples
    (:mod:`faithbench.attributions.sampling`), each sample seeded as if alone, so a map never depends on its batch."""

    capabilities = Capabilities(seeded=True, text=True)
    choices: ClassVar[dict] = {"segmentation": SEGMENTATIONS}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        seg_params = self.params["segmentation_params"]
        if seg_params is not None and not isinstance(seg_params, dict):
            raise ParameterError(
                f"method {self.name!r} parameter segmentation_params must be a table, got {seg_params!r}"
            )

    def shares_equal_inputs(self, model: ModelAdapter) -> bool:
        return True  # perturbations are deduplicated by input content and kept segments (sampling._evaluate)

    def _sampling(self) -> dict:
        """The sampler's settings, as the sampling functions name them."""
        p = self.params
        return {"n_samples": p["n_samples"], "baseline": p["baseline"], "seed": p["seed"], "max_batch": self.max_batch}

    def segment_count(self, model: ModelAdapter) -> tuple[int, str]:
        """(segments of one input of ``model``, why that is an estimate or "" where it is exact), for the cost."""
        if model.modality == "text":  # every token one segment, [CLS] / [SEP] / padding one more
            return model.input_size[-1] - 1, "text: counted at the longest input (every token a segment)"
        h, w = model.input_size[-2:]
        params = self.params["segmentation_params"] or {}
        method = resolve_segmentation(self.params["segmentation"], h, w)
        if method == "patches":
            grid = int(params.get("grid", 7))
            return min(grid, h) * min(grid, w), ""
        if method == "slic":  # its initial cluster centres; connectivity merges some
            from skimage.util import regular_grid

            n = np.zeros((1, h, w))[regular_grid((1, h, w), int(params.get("n_segments", 50)))].size
            return n, f"slic: {n} segments (its grid of centres; the image decides)"
        n = max(1, h * w // (4 * int(params.get("kernel_size", 4))) ** 2)
        return n, f"quickshift: about {n} segments (a rough guess: the image decides)"

    def cost_note(self, model: ModelAdapter) -> str:
        return self.segment_count(model)[1]

    def _segments(self, model: ModelAdapter, inputs: Tensor) -> Tensor:
        if model.modality == "text":
            return token_segments(inputs)
        return segment(
            model.encoding.decode(inputs).clamp(0, 1),
            self.params["segmentation"],
            **(self.params["segmentation_params"] or {}),
        )

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        segments = self._segments(model, inputs)
        values = self._values(self._scorer(model), inputs, segments, targets)
        maps = segment_maps(values, segments)
        return maps * inputs.ne(0).any(dim=1) if model.modality == "text" else maps  # padding: 0

    def _scorer(self, model: ModelAdapter) -> ScoreFn:
        """The model's probabilities, its calls keyed by the model's name and this method (:func:`faithbench.calls.
        call_key`), so the size they step down to after an out-of-memory error is kept for the next call. A new
        callable each time: a randomised copy of the model has the same name and must be the one scored."""

        def score(x: Tensor) -> Tensor:
            return model.probabilities(model.module(x))

        name_calls(score, f"{model.name} {self.name} samples")
        return score

    def _values(self, score: ScoreFn, inputs: Tensor, segments: Tensor, targets: Tensor) -> Tensor:
        """(B, K) per-segment values."""
        raise NotImplementedError


class Lime(_SegmentMethod):
    name = "lime"
    description = (
        "LIME on superpixels / tokens (ridge surrogate, exp. cosine kernel 0.25 as the lime package; Captum's draws)"
    )
    defaults: ClassVar[dict] = {
        "n_samples": 500,
        "segmentation": "auto",
        "segmentation_params": None,
        "output": "weights",
        "top_k": 5,
        "baseline": 0.0,
        "kernel_width": 0.25,
        "ridge_alpha": 1.0,
        "seed": 0,
    }
    choices: ClassVar[dict] = {**_SegmentMethod.choices, "output": ("weights", "top_k_mask")}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        for key in ("ridge_alpha", "kernel_width"):
            if not self.params[key] > 0:  # alpha 0 leaves the padded features' columns singular
                raise ParameterError(f"method 'lime' parameter {key} must be > 0, got {self.params[key]!r}")

    def _values(self, score: ScoreFn, inputs: Tensor, segments: Tensor, targets: Tensor) -> Tensor:
        p = self.params
        weights = lime_weights(
            score, inputs, segments, targets, kernel_width=p["kernel_width"], alpha=p["ridge_alpha"], **self._sampling()
        )
        if p["output"] == "top_k_mask":  # TPAMI: binary mask of the top-k positive superpixels
            return top_k_mask(weights, p["top_k"])
        return weights

    def model_inputs_per_explanation(self, model: ModelAdapter) -> int:
        """The distinct ones among the ``n_samples`` draws of segments to keep (Captum's draws for K segments)."""
        k, gen = self.segment_count(model)[0], torch.Generator().manual_seed(self.params["seed"])
        draws = torch.bernoulli(torch.full((self.params["n_samples"], k), 0.5), generator=gen)
        return len(torch.unique(draws, dim=0))


class ShapleySampling(_SegmentMethod):
    name = "shapley_sampling"
    description = "Shapley value sampling over image segments (default 7 x 7 patches) or tokens (Captum's sampling)"
    defaults: ClassVar[dict] = {
        "n_samples": 25,
        "segmentation": "patches",
        "segmentation_params": None,
        "baseline": 0.0,
        "seed": 0,
    }

    def _values(self, score: ScoreFn, inputs: Tensor, segments: Tensor, targets: Tensor) -> Tensor:
        return shapley_sampling_values(score, inputs, segments, targets, **self._sampling())

    def model_inputs_per_explanation(self, model: ModelAdapter) -> int:
        """The all-baseline input and every distinct set of the first s = 1..K segments of the ``n_samples``
        permutations (Captum's draws for K segments): K n_samples + 1 less the sets that repeat (all K, at least)."""
        k, gen = self.segment_count(model)[0], torch.Generator().manual_seed(self.params["seed"])
        sets = set()
        for _ in range(self.params["n_samples"]):
            order = torch.randperm(k, generator=gen).tolist()
            sets |= {frozenset(order[: s + 1]) for s in range(k)}
        return 1 + len(sets)
