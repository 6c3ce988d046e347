"""How images in [0, 1] become model input: normalised channels, or B-cos [x, 1 - x] channels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class InputEncoding:
    """Image (B, C, H, W) in [0, 1] -> model input.

    ``add_inverse`` appends ``1 - x`` (B-cos: 6 channels for RGB, 2 for grayscale); ``mean`` /
    ``std`` (one value per *output* channel) normalise afterwards when given. ``normalise_first``: ALOE's
    order instead, ``z = (x - mean) / std`` (one value per image channel) and then ``[z, 1 - z]``.
    """

    name: str
    image_channels: int
    add_inverse: bool = False
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    normalise_first: bool = False

    @property
    def channels(self) -> int:
        return self.image_channels * (2 if self.add_inverse else 1)

    def __call__(self, images: Tensor) -> Tensor:
        if images.dim() != 4 or images.shape[1] != self.image_channels:
            raise ValueError(
                f"encoding {self.name!r} expects images (B, {self.image_channels}, H, W) in [0, 1], "
                f"got shape {tuple(images.shape)}"
            )
        if self.normalise_first:
            z = self._normalise(images)
            return torch.cat([z, 1 - z], dim=1) if self.add_inverse else z
        x = torch.cat([images, 1 - images], dim=1) if self.add_inverse else images
        return self._normalise(x)

    def _stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        as_x = {"dtype": x.dtype, "device": x.device}
        return torch.tensor(self.mean, **as_x).view(1, -1, 1, 1), torch.tensor(self.std, **as_x).view(1, -1, 1, 1)

    def _normalise(self, x: Tensor) -> Tensor:
        if self.mean is None:
            return x
        mean, std = self._stats(x)
        return (x - mean) / std

    def decode(self, inputs: Tensor) -> Tensor:
        """Model input -> the image in [0, 1] (undoes the normalisation, keeps the first C channels)."""
        x = inputs[:, : self.image_channels] if self.normalise_first else inputs
        if self.mean is not None:
            mean, std = self._stats(x)
            x = x * std + mean
        return x[:, : self.image_channels]


def normalized(mean: tuple[float, ...], std: tuple[float, ...]) -> InputEncoding:
    return InputEncoding("normalized", len(mean), mean=mean, std=std)


def bcos_inverse(image_channels: int) -> InputEncoding:
    """[x, 1 - x]: 6 channels for RGB, 2 for grayscale."""
    return InputEncoding(f"bcos-{2 * image_channels}ch", image_channels, add_inverse=True)


def aloe_inverse(mean: tuple[float, ...], std: tuple[float, ...]) -> InputEncoding:
    """ALOE's input: the teacher's normalisation, then [z, 1 - z] (6 channels for RGB)."""
    return InputEncoding("aloe-6ch", len(mean), add_inverse=True, mean=mean, std=std, normalise_first=True)
