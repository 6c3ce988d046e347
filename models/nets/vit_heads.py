"""ViT heads that classify every token before the mean over tokens (B-cosification's ``gap_reorder``).

The ``bcos`` package's SimpleViT averages its tokens, then classifies. For a B-cos head the order matters
(B-cosification's "classifier before global pooling", docs/models.md): classified first, each token's
class evidence keeps its own B-cos scale, as in a CNN whose 1x1 classifier runs before the pooling.
"""

from __future__ import annotations

from bcos.models.vit import SimpleViT
from einops import rearrange
from torch import Tensor, nn


class TokenClassifierViT(nn.Module):
    """``vit`` (a ``bcos`` SimpleViT) with its ``linear_head`` applied to every token, then the mean over tokens."""

    def __init__(self, vit: SimpleViT) -> None:
        super().__init__()
        if not isinstance(vit, SimpleViT):
            raise TypeError(f"TokenClassifierViT wraps the bcos package's SimpleViT, got {type(vit).__name__}")
        self.vit = vit

    def forward(self, img: Tensor) -> Tensor:
        v = self.vit
        x = v.to_patch_embedding(img)
        x = rearrange(x, "b ... d -> b (...) d") + v.positional_embedding(x)
        return v.linear_head(v.to_latent(v.transformer(x))).mean(dim=1)
