"""Attention rollout on torchvision ViTs ([CLS] token, nn.MultiheadAttention) and refusal without attention."""

import pytest
import torch
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.attributions.rollout import record_attention
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import normalized


def torchvision_vit() -> ModelAdapter:
    torch.manual_seed(0)
    net = VisionTransformer(image_size=28, patch_size=7, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
    net.heads = nn.Linear(16, 10)
    encoding = normalized((0.5,) * 3, (0.25,) * 3)
    return ModelAdapter("tv_vit", "standard", net.eval(), encoding, 10, (28, 28), is_vit=True)


def test_rollout_on_a_torchvision_vit_is_the_cls_row_of_the_hand_computed_product():
    model = torchvision_vit()
    x = model.encode(torch.rand(3, 3, 28, 28, generator=torch.Generator().manual_seed(1)))
    maps = get_method("attention_rollout").attribute(model, x, torch.tensor([0, 5, 9]))
    # By hand: run the blocks, asking each attention module for its per-head weights.
    net = model.module
    with torch.no_grad():
        tokens = net._process_input(x)
        tokens = torch.cat([net.class_token.expand(len(x), -1, -1), tokens], dim=1) + net.encoder.pos_embedding
        product = torch.eye(17).expand(3, 17, 17)
        for block in net.encoder.layers:
            h = block.ln_1(tokens)
            out, weights = block.self_attention(h, h, h, need_weights=True, average_attn_weights=False)
            a = 0.5 * weights.mean(1) + 0.5 * torch.eye(17)
            product = (a / a.sum(-1, keepdim=True)) @ product
            tokens = tokens + out
            tokens = tokens + block.mlp(block.ln_2(tokens))
    expected = product[:, 0, 1:].reshape(3, 1, 4, 4).repeat_interleave(7, 2).repeat_interleave(7, 3)[:, 0]
    torch.testing.assert_close(maps, expected)
    again = get_method("attention_rollout").attribute(model, x, torch.tensor([1, 1, 1]))
    assert torch.equal(maps, again)  # class-agnostic
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in net.modules())  # hooks removed


def test_recorded_attention_has_one_map_per_block_and_head():
    model = torchvision_vit()
    x = model.encode(torch.rand(2, 3, 28, 28))
    maps = record_attention(model.module, lambda: model.module(x))
    assert [tuple(m.shape) for m in maps] == [(2, 2, 17, 17)] * 2
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 2, 17))


def test_a_vit_without_readable_attention_is_refused_before_it_runs():
    calls = []

    class PatchMLP(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x.flatten(1)[:, :10]

    model = ModelAdapter("mlp", "standard", PatchMLP(), normalized((0.5,), (0.25,)), 10, (28, 28), is_vit=True)
    with pytest.raises(UnsupportedMethodError, match="SelfAttention, and it has none"):
        get_method("attention_rollout").attribute(model, torch.rand(1, 1, 28, 28), torch.tensor([0]))
    assert not calls


def test_chefer_cam_on_a_torchvision_vit_equals_the_hand_computed_rule_and_keeps_the_model_function():
    model = torchvision_vit()
    x = model.encode(torch.rand(3, 3, 28, 28, generator=torch.Generator().manual_seed(2)))
    targets = torch.tensor([0, 5, 9])
    net = model.module
    plain = net(x)
    maps = get_method("chefer_cam").attribute(model, x, targets)
    # By hand: the blocks with the attention weights in the graph (the recomputation is checked against
    # nn.MultiheadAttention below), the gradient of the target logits, the rule, the [CLS] row.
    from faithbench.attributions.chefer import _mha_with_weights

    tokens = net._process_input(x)
    tokens = torch.cat([net.class_token.expand(len(x), -1, -1), tokens], dim=1) + net.encoder.pos_embedding
    weights = []
    for block in net.encoder.layers:
        h = block.ln_1(tokens)
        out, w = _mha_with_weights(block.self_attention, h, h, h)
        weights.append(w)
        tokens = tokens + out
        tokens = tokens + block.mlp(block.ln_2(tokens))
    logits = net.heads(net.encoder.ln(tokens)[:, 0])
    torch.testing.assert_close(logits, plain)
    grads = torch.autograd.grad(logits.gather(1, targets.view(-1, 1)).sum(), weights)
    r = torch.eye(17).expand(3, 17, 17)
    for w, g in zip(weights, grads, strict=True):
        r = r + (g * w).clamp(min=0).mean(1) @ r
    expected = r[:, 0, 1:].reshape(3, 1, 4, 4).repeat_interleave(7, 2).repeat_interleave(7, 3)[:, 0]
    torch.testing.assert_close(maps, expected.detach())
    assert all(not m._forward_hooks for m in net.modules())
    other = get_method("chefer_cam").attribute(model, x, torch.tensor([1, 2, 3]))
    assert not torch.equal(maps, other)  # class-specific
    net.zero_grad(set_to_none=True)  # the by-hand check above used autograd.grad too: nothing to clear
    get_method("chefer_cam").attribute(model, x, targets)
    assert all(p.grad is None for p in net.parameters())  # no parameter gradient is left behind


def test_the_recomputed_multihead_attention_is_the_module_s_own():
    from faithbench.attributions.chefer import _mha_with_weights

    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 5, 8)
    out_ref, _ = mha(x, x, x, need_weights=False)
    out, attn = _mha_with_weights(mha, x, x, x)
    torch.testing.assert_close(out, out_ref)
    torch.testing.assert_close(attn, mha(x, x, x, need_weights=True, average_attn_weights=False)[1])
