"""Toy models whose scores can be worked out by hand: the examples in the metric functions' docstrings use them,
and so can a test of a user's own metric.

Both are additive: a feature's contribution to logit 0 is its weight times its value, logit 1 is 0, so removing
features lowers logit 0 by exactly their weights and the weights themselves are the exact attribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ToyModel:
    """``forward(inputs) -> (B, 2)`` logits, an input, its exact attribution and the explained class (0)."""

    weights: Tensor
    inputs: Tensor
    attributions: Tensor
    targets: Tensor

    def args(self) -> tuple:
        """``(forward, inputs, attributions, targets)``: the first arguments of the metric functions."""
        return self.forward, self.inputs, self.attributions, self.targets

    @property
    def feature_mask(self) -> Tensor:
        """(B, T) bool: every feature on the input's last dim may be removed (the text toy's tokens; none padding)."""
        return torch.ones(self.inputs.shape[0], self.inputs.shape[-1], dtype=torch.bool)

    def forward(self, inputs: Tensor) -> Tensor:
        logit = (inputs * self.weights).flatten(1).sum(1)
        return torch.stack([logit, torch.zeros_like(logit)], 1)


def linear_image_model() -> ToyModel:
    """A 4 x 4 one-channel image of ones and weights w = 0, 1, ..., 15 (row-major): logit 0 = 120; the map is w
    (1, 4, 4), so its 2 x 2 cells sum to 10, 18, 42 and 50.

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()
        >>> toy.forward(toy.inputs)
        tensor([[120.,   0.]])
    """
    weights = torch.arange(16.0).reshape(1, 1, 4, 4)
    return ToyModel(weights, torch.ones(1, 1, 4, 4), weights[:, 0].clone(), torch.tensor([0]))


def additive_text_model() -> ToyModel:
    """Four tokens (ids all 1, none padding) of weights 3, 1, 0, 2: logit 0 = 6; the map is the weights (1, 4).

    Example:
        >>> from faithbench.metrics.toy import additive_text_model
        >>> toy = additive_text_model()
        >>> toy.forward(toy.inputs), toy.attributions
        (tensor([[6., 0.]]), tensor([[3., 1., 0., 2.]]))
    """
    weights = torch.tensor([[3.0, 1.0, 0.0, 2.0]])
    return ToyModel(weights, torch.ones(1, 4), weights.clone(), torch.tensor([0]))
