"""The native explanation W(x)x of B-cos, B-cosified and ALOE models."""

from __future__ import annotations

from torch import Tensor

from attributions.base import AttributionMethod, Capabilities
from models.adapter import ModelAdapter


class NativeExplanation(AttributionMethod):
    name = "native"
    description = "W(x)x: input x gradient in the model's explanation mode (dynamic factors detached)"
    capabilities = Capabilities(needs_native=True)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return model.explain_native(inputs, targets)
