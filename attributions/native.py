"""The native explanation W(x)x of B-cos, B-cosified and ALOE models.

``wrt = "input"`` (default, the papers' W(x)x) takes the contributions of the model input itself.
A B-cosified model's layer 0 normalises the [x, 1 - x] input, ``z = (x - m) / s``, a map with a
constant offset, so the raw-input contributions miss ``W(x) (-m / s)`` (on MNIST, m = 0.13, a median
21 % of the logit). ``wrt = "normalised-input"`` takes the contributions of ``z`` instead, which
sum to the logit exactly (minus the logit bias), and maps them to pixels by the same channel sum.
Models without a normalisation layer (B-cos from scratch) give the same map either way.

On ViTs the logit also holds the positional embeddings' contribution ``W(x) p``, which no pixel carries:
:meth:`NativeExplanation.positional_term` computes it, the ``positional_share`` metric reports it and
``completeness_gap`` counts it as its own term (``[completeness] positional_term``).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from bcos.common import explanation_mode
from torch import Tensor, nn

from faithbench.attributions.base import AttributionMethod, Capabilities, one_pass
from faithbench.attributions.shared_forward import grads_per_row
from faithbench.models.adapter import ModelAdapter, input_x_gradient, positional_contribution, positional_embeddings
from faithbench.models.bcosify import InputNormalization


def split_input_normalization(module: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(layer 0, the rest) of a B-cosified ``Sequential`` whose first layer normalises the input, else None."""
    if isinstance(module, nn.Sequential) and len(module) > 1 and isinstance(module[0], InputNormalization):
        return module[0], nn.Sequential(*list(module)[1:])
    return None


class NativeExplanation(AttributionMethod):
    name = "native"
    description = "W(x)x: input x gradient in the model's explanation mode (dynamic factors detached)"
    capabilities = Capabilities(needs_native=True, text=True)
    defaults: ClassVar[dict] = {"wrt": "input"}
    choices: ClassVar[dict] = {"wrt": ("input", "normalised-input")}
    completeness = "logit"
    model_inputs_per_explanation = one_pass

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        parts = split_input_normalization(model.module) if self.params["wrt"] == "normalised-input" else None
        if parts is None:
            return model.explain_native(inputs, targets)
        normalise, rest = parts
        return input_x_gradient(rest, normalise(inputs), targets, explanation=True)

    def shares_forward(self, model: ModelAdapter) -> bool:
        # A model that brings its own explainer (ALOE from the Hub) is called as it is.
        return model.native_explainer is None and model.modality == "image"

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        parts = split_input_normalization(model.module) if self.params["wrt"] == "normalised-input" else None
        module, x = (model.module, distinct) if parts is None else (parts[1], parts[0](distinct))
        x = x.detach().clone().requires_grad_(True)
        with torch.enable_grad(), explanation_mode(module):
            (grads,) = grads_per_row(module(x), [x], inverse, occurrence, targets)
        return x.detach()[inverse] * grads[0]

    def has_positional_term(self, model: ModelAdapter) -> bool:
        # A model that brings its own explainer (ALOE from the Hub) decomposes its logit its own way.
        return model.native_explainer is None and bool(positional_embeddings(model.module))

    def positional_term(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor | None:
        """W(x) p, the positional embeddings' share of the logit (the same for either ``wrt``: layer 0 comes
        before them)."""
        return positional_contribution(model.module, inputs, targets) if self.has_positional_term(model) else None


class NativeNormalisedInput(NativeExplanation):
    """``native`` with ``wrt = "normalised-input"``, under its own name so a suite can run both."""

    name = "native_normalised"
    capabilities = Capabilities(needs_native=True)  # text models have no input-normalisation layer
    description = "W(x)x of the normalised input: complete for B-cosified / ALOE models (sums to the logit)"
    defaults: ClassVar[dict] = {"wrt": "normalised-input"}

    def _check(self, model: ModelAdapter) -> None:
        if split_input_normalization(model.module) is None:
            self._unsupported(model, "it has no input-normalisation layer 0, so this equals 'native'")
