"""Small models whose answers can be computed by hand."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from faithbench.models.bcosify import bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.nets.architectures import digit_vit


def bcosified_digit_vit(depth: int = 2, dim: int = 32, seed: int = 0) -> nn.Module:
    """An untrained digit ViT (every token classified, then the mean) B-cosified with 10 classes, seeded."""
    torch.manual_seed(seed)
    return bcosify(
        digit_vit(depth=depth, dim=dim),
        image_channels=1,
        mean=MNIST_MEAN,
        std=MNIST_STD,
        first_layer="to_patch_embedding.linear",
        num_classes=10,
    )


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
