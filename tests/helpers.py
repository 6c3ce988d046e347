"""Small models whose answers can be computed by hand."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class AdditiveImageModel(nn.Module):
    """Class 0 scores sum_{c,h,w} v[h,w] x[c,h,w]; class 1 scores 0.

    With ``activation="identity"`` the "probability" of class 0 is that sum, so deletion curves
    are partial sums of v x, computable by hand.
    """

    def __init__(self, pixel_weights: Tensor) -> None:
        super().__init__()
        self.register_buffer("v", pixel_weights)

    def forward(self, x: Tensor) -> Tensor:
        s = (x * self.v).flatten(1).sum(1)
        return torch.stack([s, torch.zeros_like(s)], dim=1)


class AdditiveTokenModel(nn.Module):
    """Class 0 scores sum_t v[ids_t] (the mask token has value 0); class 1 scores 0."""

    def __init__(self, token_values: Tensor) -> None:
        super().__init__()
        self.register_buffer("v", token_values)

    def forward(self, ids: Tensor) -> Tensor:
        s = self.v[ids].sum(1)
        return torch.stack([s, torch.zeros_like(s)], dim=1)


def small_cnn(in_channels: int = 1, classes: int = 4, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(in_channels, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64, classes),
    ).eval()
