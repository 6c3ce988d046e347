"""Attention rollout (Abnar & Zuidema 2020): class-agnostic by design.

Attention is read through hooks on the attention modules, so any ViT whose attention exposes its
weights works: the ``bcos`` package's ``Attention`` blocks (the softmax module ``attend``) and
``nn.MultiheadAttention`` (torchvision's ViTs call it with ``need_weights=False``; a pre-hook asks it
for the per-head weights), and the text models' ``SelfAttention`` (softmax module ``attend``). A model
with none is refused before any compute. Text maps are the [CLS] row over the tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bcos.models.vit import Attention
from torch import Tensor, nn

from faithbench.attributions.base import AttributionMethod, Capabilities, one_pass
from faithbench.models.adapter import ModelAdapter
from faithbench.models.nets.text_transformer import SelfAttention


def attention_modules(module: nn.Module) -> list[nn.Module]:
    """The attention blocks whose weights these methods can read."""
    return [m for m in module.modules() if isinstance(m, Attention | SelfAttention | nn.MultiheadAttention)]


def cls_row(relevance: Tensor, length: int) -> Tensor:
    """Token maps (B, length) of a text model: the [CLS] row, zero-padded to the input's length (the model drops
    trailing padding before its blocks run)."""
    row = relevance[:, 0]
    return F.pad(row, (0, length - row.shape[-1]))


def token_map(relevance: Tensor, size: tuple[int, int]) -> Tensor:
    """Pixel maps (B, *size) from token-to-token relevance (B, N, N): the [CLS] row over the patch tokens
    when the tokens are one [CLS] plus a square grid (torchvision), else (mean-pooled ViTs without [CLS])
    the mean over output tokens; each patch's value on its pixels."""
    n = relevance.shape[-1]
    side = math.isqrt(n)
    if side * side == n:
        tokens = relevance.mean(dim=1)
    else:
        side = math.isqrt(n - 1)
        if side * side != n - 1:
            raise ValueError(f"{n} tokens are neither a square patch grid nor one [CLS] token plus one")
        tokens = relevance[:, 0, 1:]
    return F.interpolate(tokens.reshape(-1, 1, side, side), size=size, mode="nearest")[:, 0]


def record_attention(module: nn.Module, run: Callable[[], object]) -> list[Tensor]:
    """The attention weights (B, heads, N, N) of every attention block, in call order, while ``run()`` runs."""
    maps: list[Tensor] = []

    def ask_for_weights(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True, "average_attn_weights": False}

    hooks = []
    for m in attention_modules(module):
        if isinstance(m, Attention | SelfAttention):
            hooks.append(m.attend.register_forward_hook(lambda _m, _i, out: maps.append(out)))
        else:
            hooks.append(m.register_forward_pre_hook(ask_for_weights, with_kwargs=True))
            hooks.append(m.register_forward_hook(lambda _m, _i, out: maps.append(out[1])))
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return maps


class AttentionRollout(AttributionMethod):
    name = "attention_rollout"
    description = "attention rollout: product of (A + I)/2 over blocks, head-averaged; the same map for every class"
    capabilities = Capabilities(cnn=False, text=True, class_specific=False)
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        if not attention_modules(model.module):
            self._unsupported(
                model,
                "it reads attention weights from bcos-style Attention blocks, nn.MultiheadAttention or the text "
                "models' SelfAttention, and it has none",
            )

    @torch.no_grad()
    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        attn_maps = record_attention(model.module, lambda: model.module(inputs))
        n = attn_maps[0].shape[-1]
        eye = torch.eye(n, device=inputs.device, dtype=attn_maps[0].dtype)
        rollout = eye.expand(inputs.shape[0], n, n)
        for a in attn_maps:
            a = 0.5 * a.mean(dim=1) + 0.5 * eye
            rollout = (a / a.sum(dim=-1, keepdim=True)) @ rollout
        if model.modality == "text":
            return cls_row(rollout, inputs.shape[-1])
        return token_map(rollout, tuple(inputs.shape[-2:]))


class LastLayerAttention(AttributionMethod):
    """The B-cos LM code's raw attention baseline: the last block's attention from [CLS], averaged over heads."""

    name = "attention_last"
    description = "last block's attention from [CLS] (ViTs: token_map), head-averaged; the same map for every class"
    capabilities = Capabilities(cnn=False, text=True, class_specific=False)
    _check = AttentionRollout._check
    model_inputs_per_explanation = one_pass

    @torch.no_grad()
    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        last = record_attention(model.module, lambda: model.module(inputs))[-1].mean(dim=1)
        if model.modality == "text":
            return cls_row(last, inputs.shape[-1])
        return token_map(last, tuple(inputs.shape[-2:]))
