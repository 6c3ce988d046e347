"""Control explainers: maps that never ask the model, to tell what a metric gives for free.

A metric that scores a real explanation no better than these cannot tell it from noise or from a
prior. Every control is class-agnostic and costs no model call; on text models they are 0 on padding.

- ``random``: seeded noise, uniform in [-1, 1), a deterministic function of (seed, input, position),
  so a map does not depend on the batch it was explained in, and CPU and GPU agree (text: of the
  signs of seeded projections of the embeddings, which float rounding does not flip: :func:`text_content`).
- ``uniform``: 1 on every feature.
- ``centre``: a centred Gaussian prior, standard deviation ``sigma`` x the side (text: x the sentence's
  token count, centred on its middle token).
- ``edges``: the Sobel gradient magnitude of the model input, summed over channels (text: the token
  position, 1 on the first token falling linearly to 1 / n on the last of the sentence's n).
- ``oracle``: the ground truth of a metric that has one (the explained cell of a GridPG grid, the
  explained segment of a SeqPG sequence), 1 inside and 0 outside; the other metrics leave it out.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.attributions.base import AttributionMethod, Capabilities, UnsupportedMethodError, no_model_input
from faithbench.models.adapter import ModelAdapter

CONTROLS = ("random", "uniform", "centre", "edges", "oracle")
_CAPS = Capabilities(text=True, class_specific=False, model_free=True)


def text_positions(inputs: Tensor) -> tuple[Tensor, Tensor]:
    """Text: (B, T) token positions and the bool mask of non-padding tokens (all-zero embeddings are padding)."""
    present = inputs.abs().sum(dim=1) != 0
    return torch.arange(inputs.shape[-1], device=inputs.device).expand_as(present), present


class _Control(AttributionMethod):
    capabilities: ClassVar[Capabilities] = _CAPS
    model_inputs_per_explanation = no_model_input

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        if model.modality == "text":
            pos, present = text_positions(inputs)
            return self._text(inputs, pos, present).masked_fill(~present, 0).to(inputs.dtype)
        return self._image(inputs).to(inputs.dtype)

    def _image(self, inputs: Tensor) -> Tensor:
        raise NotImplementedError

    def _text(self, inputs: Tensor, pos: Tensor, present: Tensor) -> Tensor:
        raise NotImplementedError


class RandomControl(_Control):
    name = "random"
    description = "control: seeded noise in [-1, 1), independent of the model"
    capabilities = Capabilities(text=True, class_specific=False, seeded=True, model_free=True)
    defaults: ClassVar[dict] = {"seed": 0}

    def _noise(self, content: Tensor, positions: int) -> Tensor:
        # A hash in float64 (sin-fract): the input's content picks the stream, the position the value in it.
        pos = torch.arange(positions, device=content.device, dtype=torch.float64)
        phase = torch.sin(content[:, None] * 12.9898 + pos * 78.233 + self.params["seed"] * 0.5) * 43758.5453
        return 2 * torch.frac(phase).abs() - 1

    def _image(self, inputs: Tensor) -> Tensor:
        # An image's pixels are data, the same bits on every machine: their seeded weighted sum (row by row, so
        # batch-invariant) is the content.
        b, _, h, w = inputs.shape
        gen = torch.Generator().manual_seed(self.params["seed"])
        weights = torch.rand(inputs[0].numel(), generator=gen, dtype=torch.float64).to(inputs.device)
        return self._noise((inputs.reshape(b, -1).double() * weights).sum(dim=1), h * w).reshape(b, h, w)

    def _text(self, inputs: Tensor, pos: Tensor, present: Tensor) -> Tensor:
        return self._noise(text_content(inputs, self.params["seed"]), inputs.shape[-1])


SIMHASH_BITS = 16


def text_content(inputs: Tensor, seed: int, bits: int = SIMHASH_BITS) -> Tensor:
    """(B,) float64 in [0, 1): a sentence's content from the signs of ``bits`` seeded projections of each token's
    embedding (a SimHash), combined over positions by integer hashing (wrapping int64: exact, order-free).

    A text model's inputs are its embeddings, which a model retrained on another CPU type holds to other last bits;
    a float sum of them would pick another noise stream there (measured: every ``random`` row of the smoke-text
    suite moved). A sign flips only where a projection is within that rounding of 0, |x . w| ~ 1e-6 against a
    typical 20. Padding (all-zero) contributes no bit, so the content does not depend on the padded length.
    """
    b, d, t = inputs.shape
    gen = torch.Generator().manual_seed(seed)
    directions = torch.randn(d, bits, generator=gen, dtype=torch.float64).to(inputs.device)
    signs = torch.einsum("bdt,dk->btk", inputs.double(), directions) > 0  # (B, T, bits)
    index = torch.arange(t * bits, device=inputs.device, dtype=torch.int64).reshape(t, bits) + 1
    weights = index * -7046029254386353131 + seed  # an odd 64-bit multiplier (wraps): distinct weights per bit
    weights = weights ^ (weights >> 29)
    key = (signs.long() * weights).sum(dim=(1, 2))
    return (key & (2**40 - 1)).double() / 2**40


class UniformControl(_Control):
    name = "uniform"
    description = "control: the same value on every feature"

    def _image(self, inputs: Tensor) -> Tensor:
        return torch.ones(inputs.shape[0], *inputs.shape[2:], device=inputs.device)

    def _text(self, inputs: Tensor, pos: Tensor, present: Tensor) -> Tensor:
        return present.double()


class CentreControl(_Control):
    name = "centre"
    description = "control: a centred Gaussian prior (text: centred on the sentence's middle token)"
    defaults: ClassVar[dict] = {"sigma": 0.25}

    def _image(self, inputs: Tensor) -> Tensor:
        b, _, h, w = inputs.shape
        s = self.params["sigma"]
        y = torch.arange(h, device=inputs.device, dtype=torch.float64) - (h - 1) / 2
        x = torch.arange(w, device=inputs.device, dtype=torch.float64) - (w - 1) / 2
        prior = torch.exp(-0.5 * ((y[:, None] / (s * h)) ** 2 + (x[None, :] / (s * w)) ** 2))
        return prior.expand(b, h, w)

    def _text(self, inputs: Tensor, pos: Tensor, present: Tensor) -> Tensor:
        n = present.sum(dim=1, keepdim=True).double().clamp(min=1)
        first = present.double().argmax(dim=1, keepdim=True)
        centre = first + (n - 1) / 2
        return torch.exp(-0.5 * ((pos - centre) / (self.params["sigma"] * n)) ** 2)


class EdgesControl(_Control):
    name = "edges"
    description = "control: Sobel edge magnitude of the input (text: the token position, first tokens highest)"

    def _image(self, inputs: Tensor) -> Tensor:
        c = inputs.shape[1]
        sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]], device=inputs.device)
        kernels = torch.stack([sobel, sobel.T]).unsqueeze(1).repeat(c, 1, 1, 1).to(inputs.dtype)  # (2C, 1, 3, 3)
        grads = F.conv2d(F.pad(inputs, (1, 1, 1, 1), mode="replicate"), kernels, groups=c)
        return grads.reshape(inputs.shape[0], c, 2, *inputs.shape[2:]).pow(2).sum(2).sqrt().sum(1)

    def _text(self, inputs: Tensor, pos: Tensor, present: Tensor) -> Tensor:
        n = present.sum(dim=1, keepdim=True).double().clamp(min=1)
        rank = present.long().cumsum(dim=1) - 1  # 0 on the first present token
        return (n - rank.double()) / n


class OracleControl(AttributionMethod):
    name = "oracle"
    description = "control: the ground truth of metrics that have one (GridPG cell, SeqPG segment)"
    capabilities = Capabilities(text=True, class_specific=True, ground_truth=True, model_free=True)
    model_inputs_per_explanation = no_model_input

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        raise UnsupportedMethodError(
            "method 'oracle' has no map without a metric's ground truth; only metrics that have one "
            "(the grid and sequence pointing games) score it"
        )

    def from_truth(self, truth: Tensor) -> Tensor:
        """The oracle's maps: 1 on the ground-truth region (bool, any shape), 0 elsewhere."""
        return truth.to(torch.float32)


CONTROL_METHODS = (RandomControl, UniformControl, CentreControl, EdgesControl, OracleControl)
