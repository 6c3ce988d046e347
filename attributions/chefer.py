"""CheferCAM: gradient-weighted attention relevance (Chefer et al., ICCV 2021, "Generic
Attention-model Explainability"), the ViT baseline of ALOE Tab. B6.

With A_b the (heads, N, N) attention of block b and grad A_b the gradient of the target logit w.r.t. it,

    R = I;   for every block b in order:   R <- R + mean_heads[(grad A_b * A_b)^+] @ R,

and the map is the [CLS] row of R - I over the patch tokens (mean-pooled ViTs without [CLS]: the mean
over rows of R - I), upsampled to the input. Attention is read through hooks on the attention modules (the ``bcos``
package's ``Attention`` softmax, or ``nn.MultiheadAttention`` recomputed in the hook from its own
projections so that the weights are part of the graph); the model runs as it is (no explanation mode).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from bcos.models.vit import Attention
from torch import Tensor, nn

from faithbench.attributions.base import AttributionMethod, Capabilities, one_pass
from faithbench.attributions.rollout import attention_modules, token_map
from faithbench.models.adapter import ModelAdapter


def _mha_with_weights(m: nn.MultiheadAttention, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """``m(q, k, v)`` without masks, recomputed so that the softmax weights (B, heads, N, N) are in the graph."""
    if not m.batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))
    e, h = m.embed_dim, m.num_heads
    if m._qkv_same_embed_dim:
        w = m.in_proj_weight.chunk(3)
    else:
        w = (m.q_proj_weight, m.k_proj_weight, m.v_proj_weight)
    b = m.in_proj_bias.chunk(3) if m.in_proj_bias is not None else (None, None, None)
    qh, kh, vh = (
        F.linear(t, wi, bi).unflatten(-1, (h, e // h)).transpose(1, 2)
        for t, wi, bi in zip((q, k, v), w, b, strict=True)
    )
    attn = (qh @ kh.transpose(-2, -1) / math.sqrt(e // h)).softmax(dim=-1)
    out = m.out_proj((attn @ vh).transpose(1, 2).flatten(2))
    return (out if m.batch_first else out.transpose(0, 1)), attn


class CheferCam(AttributionMethod):
    name = "chefer_cam"
    description = "CheferCAM (Chefer et al. 2021): R += mean_heads[(dA * A)^+] R over blocks, [CLS] row; class-specific"
    capabilities = Capabilities(cnn=False)
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        modules = attention_modules(model.module)
        if not modules:
            self._unsupported(
                model, "it reads bcos-style Attention blocks or nn.MultiheadAttention, and it has neither"
            )
        for m in modules:
            if isinstance(m, nn.MultiheadAttention) and (m.bias_k is not None or m.add_zero_attn):
                self._unsupported(model, "nn.MultiheadAttention with bias_k / add_zero_attn is not supported")

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        maps: list[Tensor] = []

        def keep(_m: nn.Module, _i: tuple, out: Tensor) -> None:
            maps.append(out)

        def recompute(m: nn.Module, args: tuple, kwargs: dict, output: tuple) -> tuple[Tensor, Tensor]:
            if kwargs.get("attn_mask") is not None or kwargs.get("key_padding_mask") is not None:
                raise ValueError("CheferCAM does not support attention masks")
            q, k, v = (list(args) + [kwargs.get(n) for n in ("query", "key", "value")][len(args) :])[:3]
            out, attn = _mha_with_weights(m, q, k, v)
            maps.append(attn)
            return out, attn

        hooks = []
        for m in attention_modules(model.module):
            if isinstance(m, Attention):
                hooks.append(m.attend.register_forward_hook(keep))
            else:
                hooks.append(m.register_forward_hook(recompute, with_kwargs=True))
        try:
            with torch.enable_grad():
                logits = model.module(inputs)
                # Gradients w.r.t. the attention maps only (no parameter .grad is touched).
                grads = torch.autograd.grad(logits.gather(1, targets.view(-1, 1)).sum(), maps)
        finally:
            for hook in hooks:
                hook.remove()
        n = maps[0].shape[-1]
        relevance = torch.eye(n, device=inputs.device, dtype=maps[0].dtype).expand(inputs.shape[0], n, n)
        for a, g in zip(maps, grads, strict=True):
            relevance = relevance + (g * a).clamp(min=0).mean(dim=1) @ relevance
        # Drop the identity: it only says each token is itself, and for mean-pooled ViTs (no [CLS]) its
        # 1 / N share of every token would be a constant offset that swamps the map (GridPG at chance).
        relevance = relevance.detach() - torch.eye(n, device=inputs.device, dtype=relevance.dtype)
        return token_map(relevance, tuple(inputs.shape[-2:]))
