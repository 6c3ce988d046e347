"""Attention rollout (Abnar & Zuidema 2020) for the bcos package's ViTs: class-agnostic by design."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from bcos.models.vit import Attention
from torch import Tensor

from attributions.base import AttributionMethod, Capabilities
from models.adapter import ModelAdapter


class AttentionRollout(AttributionMethod):
    name = "attention_rollout"
    description = "attention rollout: product of (A + I)/2 over blocks, head-averaged; the same map for every class"
    capabilities = Capabilities(cnn=False, class_specific=False)

    def _check(self, model: ModelAdapter) -> None:
        if not any(isinstance(m, Attention) for m in model.module.modules()):
            self._unsupported(model, "rollout reads the attention of bcos-style ViT blocks, and it has none")

    @torch.no_grad()
    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        attn_maps: list[Tensor] = []
        hooks = [
            m.attend.register_forward_hook(lambda _m, _i, out: attn_maps.append(out))
            for m in model.module.modules()
            if isinstance(m, Attention)
        ]
        try:
            model.module(inputs)
        finally:
            for h in hooks:
                h.remove()
        n = attn_maps[0].shape[-1]
        eye = torch.eye(n, device=inputs.device, dtype=attn_maps[0].dtype)
        rollout = eye.expand(inputs.shape[0], n, n)
        for a in attn_maps:
            a = 0.5 * a.mean(dim=1) + 0.5 * eye
            rollout = (a / a.sum(dim=-1, keepdim=True)) @ rollout
        # Tokens are mean-pooled (no [CLS]): relevance of input token j = mean over output tokens.
        relevance = rollout.mean(dim=1)
        side = int(round(n**0.5))
        patches = relevance.view(-1, 1, side, side)
        return F.interpolate(patches, size=tuple(inputs.shape[-2:]), mode="nearest")[:, 0]
