"""``bcosify``: turn a trained standard CNN or ViT into a B-cos model (B-cosification, NeurIPS 2024).

The recipe (B-cosification Table 1, Sec. 3.2), in two stages:

1. Functionally equivalent rewrite: the input becomes ``[x, 1 - x]`` normalised by layer 0 with
   mean (m, 1 - m) and std (s, s); the first layer's weights w become (w/2, -w/2); every
   conv / linear becomes the official ``bcos`` B-cos layer wrapping the original (unnormalised)
   weights; BatchNorm becomes uncentred with the mean folded into its bias; LayerNorm and GELU
   become detachable; a linear classifier after a global average pool moves in front of it (a 1x1
   convolution; a SimpleViT classifies every token). With ``b=1`` and biases kept the model computes
   exactly the original function (tested), except that a ViT head's LayerNorm, now per token, does not
   commute with the mean (``classifier_before_pooling=False`` keeps the order).
2. Functional changes: B = 2 everywhere, every bias removed (conv, linear, norm shifts), max
   pooling replaced by average pooling, a logit bias of -log(C - 1) appended; then fine-tuning.

The B-cos layers' dynamic scale is ``(|w.x| / ||x||)^(B-1)`` over the original weights (at B = 2
this is B-cosification's ``||w|| |cos(x, w)|``); it is detached in explanation mode.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
from bcos.models.vit import SimpleViT
from bcos.modules import BcosConv2d, BcosLinear, DetachableModule, LogitLayer
from bcos.modules.norms import BatchNormUncentered2d, DetachableLayerNorm
from torch import Tensor, nn

from faithbench.models.nets.vit_heads import TokenClassifierViT


class DetachableGELU(DetachableModule):
    """GELU seen as a dynamic gate: ``x * Phi(x)``, with the gate Phi(x) detached in explanation mode."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        if self.approximate == "tanh":
            gate = 0.5 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        else:
            gate = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
        return x * (gate.detach() if self.detach else gate)


class DetachableSelfAttention(DetachableModule):
    """``nn.MultiheadAttention`` (batch-first self-attention) rewritten so that the attention matrix is a
    dynamic linear map: in explanation mode q and k are detached (as the B-cos ViT ``Attention``).

    ``qkv`` stays a plain linear layer (its dynamics are the attention matrix); ``out_proj`` becomes
    a B-cos layer like every other linear layer. Called like ``nn.MultiheadAttention``.
    """

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        if not mha.batch_first or mha.bias_k is not None or mha.add_zero_attn or not mha._qkv_same_embed_dim:
            raise NotImplementedError("bcosify supports batch-first self-attention without bias_k/v or zero-attn")
        self.num_heads = mha.num_heads
        self.qkv = nn.Linear(mha.embed_dim, 3 * mha.embed_dim, bias=mha.in_proj_bias is not None)
        self.out_proj = nn.Linear(mha.embed_dim, mha.embed_dim, bias=mha.out_proj.bias is not None)
        with torch.no_grad():
            self.qkv.weight.copy_(mha.in_proj_weight)
            self.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.in_proj_bias is not None:
                self.qkv.bias.copy_(mha.in_proj_bias)
            if mha.out_proj.bias is not None:
                self.out_proj.bias.copy_(mha.out_proj.bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, need_weights: bool = False, **_: object):
        if not (query is key is value):
            raise NotImplementedError("only self-attention (query is key is value) is supported")
        b, n, d = query.shape
        q, k, v = self.qkv(query).view(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        if self.detach:
            q, k = q.detach(), k.detach()
        attn = (q @ k.transpose(-1, -2) / math.sqrt(d // self.num_heads)).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, d)
        return self.out_proj(out), None


class InputNormalization(nn.Module):
    """Layer 0 of a B-cosified model: fixed per-channel ``(x - mean) / std`` on the [x, 1 - x] input."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


def _bcos_conv(conv: nn.Conv2d, b: float) -> BcosConv2d:
    if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
        raise NotImplementedError(
            f"bcosify supports zero-padded convolutions with numeric padding, got padding={conv.padding!r}, "
            f"padding_mode={conv.padding_mode!r}"
        )
    if len(set(conv.dilation)) != 1:
        raise NotImplementedError(f"bcosify supports equal dilation on both axes, got {conv.dilation}")
    layer = BcosConv2d(
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        conv.padding,
        conv.dilation[0],
        conv.groups,
        b=b,
    )
    layer.linear = conv  # the original weights, unnormalised, bias kept until stage 2
    return layer


def _bcos_linear(linear: nn.Linear, b: float) -> BcosLinear:
    layer = BcosLinear(linear.in_features, linear.out_features, b=b)
    layer.linear = linear
    return layer


def _uncentred_bn(bn: nn.BatchNorm2d) -> BatchNormUncentered2d:
    new = BatchNormUncentered2d(bn.num_features, eps=bn.eps, momentum=bn.momentum)
    std = (bn.running_var + bn.eps).sqrt()
    with torch.no_grad():
        new.running_var.copy_(bn.running_var)
        new.running_mean.zero_()
        gamma = bn.weight if bn.weight is not None else torch.ones_like(std)
        beta = bn.bias if bn.bias is not None else torch.zeros_like(std)
        new.weight.copy_(gamma)
        new.bias.copy_(beta - gamma * bn.running_mean / std)  # x g / s + b' == g (x - mu) / s + b
    return new


def _detachable_ln(ln: nn.LayerNorm) -> DetachableLayerNorm:
    new = DetachableLayerNorm(
        ln.normalized_shape, eps=ln.eps, elementwise_affine=ln.elementwise_affine, bias=ln.bias is not None
    )
    new.load_state_dict(ln.state_dict())
    return new


def _expand_first_layer(layer: nn.Module, image_channels: int) -> None:
    """Weights w for normalised C-channel input -> (w/2, -w/2) for the normalised [x, 1 - x] input."""
    with torch.no_grad():
        if isinstance(layer, nn.Conv2d):
            w = layer.weight
            if w.shape[1] != image_channels:
                raise ValueError(f"first conv takes {w.shape[1]} channels, expected {image_channels}")
            layer.weight = nn.Parameter(torch.cat([w / 2, -w / 2], dim=1))
            layer.in_channels = 2 * image_channels
        elif isinstance(layer, nn.Linear):  # ViT patch embedding, features grouped (p1 p2 c), c fastest
            w = layer.weight
            if w.shape[1] % image_channels:
                raise ValueError(f"patch embedding with {w.shape[1]} inputs is not grouped by {image_channels}")
            w = w.view(w.shape[0], -1, image_channels)
            layer.weight = nn.Parameter(torch.cat([w / 2, -w / 2], dim=2).reshape(w.shape[0], -1))
            layer.in_features = 2 * w.shape[1] * image_channels
        else:
            raise TypeError(f"the first layer must be a Conv2d or a patch-embedding Linear, got {type(layer)}")


def _swap(module: nn.Module, b: float, plain: set[str], prefix: str = "") -> None:
    for name, child in list(module.named_children()):
        full = f"{prefix}{name}"
        if isinstance(child, nn.Conv2d):
            new: nn.Module = _bcos_conv(child, b)
        elif isinstance(child, nn.Linear) and name not in plain:
            new = _bcos_linear(child, b)
        elif isinstance(child, nn.BatchNorm2d):
            new = _uncentred_bn(child)
        elif isinstance(child, nn.LayerNorm):
            new = _detachable_ln(child)
        elif isinstance(child, nn.GELU):
            new = DetachableGELU(child.approximate)
        elif isinstance(child, nn.MultiheadAttention):
            new = DetachableSelfAttention(child)
            _swap(new, b, plain, full + ".")
        else:
            _swap(child, b, plain, full + ".")
            continue
        setattr(module, name, new)


def set_b(model: nn.Module, b: float) -> None:
    """Set the exponent B of every B-cos layer (stage 2 sets B = 2 at once)."""
    for m in model.modules():
        if isinstance(m, BcosConv2d | BcosLinear):
            m.b = b


def remove_biases(model: nn.Module) -> None:
    """Drop every bias: conv, linear (inside B-cos layers too) and norm shifts."""
    for m in model.modules():
        if getattr(m, "bias", None) is not None and isinstance(m.bias, nn.Parameter):
            m.bias = None


def _is_global_pool(m: nn.Module) -> bool:
    return isinstance(m, nn.AdaptiveAvgPool2d) and m.output_size in (1, (1, 1))


def classify_before_pooling(net: nn.Module) -> nn.Module:
    """Move a pooled model's linear classifier in front of its global average pooling (in place; returns the
    model, wrapped when it is a SimpleViT). CNN: the one ``AdaptiveAvgPool2d(1)`` becomes ``Sequential(1x1
    conv with the classifier's weights, the pool)`` and the ``Linear`` after it an ``Identity`` (the
    model's own forward is unchanged, so flattening in between still works); ``bcos`` SimpleViT: its head
    classifies every token, then the tokens are averaged. A linear head computes the same function either
    way; a model without a global pool before its last Linear (a class token, a dense head) is left as is."""
    if isinstance(net, SimpleViT):
        return TokenClassifierViT(net)
    named = list(net.named_modules())
    pools = [i for i, (_, m) in enumerate(named) if _is_global_pool(m)]
    if not pools:
        return net
    if len(pools) > 1:
        raise ValueError(
            f"classifier_before_pooling: {len(pools)} global average pools ({', '.join(named[i][0] for i in pools)}); "
            "pass classifier_before_pooling=False"
        )
    after = [(n, m) for n, m in named[pools[0] + 1 :] if isinstance(m, nn.Linear)]
    if not after:
        return net
    if len(after) > 1:
        raise ValueError(
            f"classifier_before_pooling: {len(after)} Linear layers after the global pool "
            f"({', '.join(n for n, _ in after)}), not one linear classifier; pass classifier_before_pooling=False"
        )
    (head_name, head), pool_name = after[0], named[pools[0]][0]
    _replace(net, pool_name, nn.Sequential(linear_as_conv1x1(head), named[pools[0]][1]))
    _replace(net, head_name, nn.Identity())
    return net


def linear_as_conv1x1(linear: nn.Linear) -> nn.Conv2d:
    """The same weights as a 1x1 convolution: applied at every position of a feature map."""
    conv = nn.Conv2d(linear.in_features, linear.out_features, 1, bias=linear.bias is not None)
    with torch.no_grad():
        conv.weight.copy_(linear.weight.view_as(conv.weight))
        if linear.bias is not None:
            conv.bias.copy_(linear.bias)
    return conv


def _replace(root: nn.Module, dotted: str, new: nn.Module) -> None:
    parent, _, name = dotted.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, name, new)


def bcosify(
    model: nn.Module,
    *,
    image_channels: int,
    mean: Sequence[float],
    std: Sequence[float],
    first_layer: str | None = None,
    b: float = 2.0,
    keep_bias: bool = False,
    avgpool_for_maxpool: bool = True,
    num_classes: int | None = None,
    plain_linear: Sequence[str] = ("to_qkv", "qkv"),
    classifier_before_pooling: bool = True,
) -> nn.Sequential:
    """B-cosify a copy of ``model`` (which takes ``image_channels`` inputs normalised by mean/std).

    Args:
        first_layer: dotted name of the layer that sees the image (default: the first Conv2d with
            ``image_channels`` input channels); ViTs name their patch-embedding Linear.
        b: the B of every B-cos layer (1 = linear: stage 1; 2 = the recipe's stage 2).
        keep_bias: keep all biases (stage 1 / ablation) instead of removing them.
        avgpool_for_maxpool: replace MaxPool2d by AvgPool2d of the same geometry.
        num_classes: append ``LogitLayer(-log(num_classes - 1))`` (the B-cos BCE logit bias).
        plain_linear: Linear layers (by attribute name) that stay plain, e.g. attention's q/k/v
            projection, whose dynamics are the attention matrix. ``nn.MultiheadAttention`` (torchvision
            ViTs) is rewritten as :class:`DetachableSelfAttention`.
        classifier_before_pooling: move the linear classifier in front of the global average pooling
            (:func:`classify_before_pooling`; B-cosification's ``gap_reorder``, TPAMI App. C). False keeps the
            model's order (ALOE's linear probe reads the pooled tokens).
    Returns:
        ``nn.Sequential(InputNormalization, model[, LogitLayer])`` taking [x, 1 - x] input.
    """
    net = copy.deepcopy(model).eval()
    modules = dict(net.named_modules())
    if first_layer is None:
        first_layer = next(
            (n for n, m in modules.items() if isinstance(m, nn.Conv2d) and m.in_channels == image_channels),
            None,
        )
        if first_layer is None:
            raise ValueError(
                f"no Conv2d with {image_channels} input channels found; pass first_layer= (e.g. the ViT's "
                "patch-embedding Linear)"
            )
    if first_layer not in modules:
        raise ValueError(f"first_layer {first_layer!r} is not a module of the model")
    _expand_first_layer(modules[first_layer], image_channels)
    if classifier_before_pooling and not isinstance(net, SimpleViT):
        net = classify_before_pooling(net)  # before the swap: the new 1x1 conv becomes a B-cos conv with the rest
    _swap(net, b, set(plain_linear))
    if avgpool_for_maxpool:
        for parent in net.modules():
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.MaxPool2d):
                    setattr(parent, name, nn.AvgPool2d(child.kernel_size, child.stride, child.padding))
    if not keep_bias:
        remove_biases(net)
    if classifier_before_pooling and isinstance(net, SimpleViT):
        net = classify_before_pooling(net)
    net.eval()  # swapped-in modules start in training mode
    layers: list[nn.Module] = [
        InputNormalization(list(mean) + [1 - m for m in mean], list(std) * 2),
        net,
    ]
    if num_classes is not None:
        layers.append(LogitLayer(logit_bias=-math.log(num_classes - 1)))
    return nn.Sequential(*layers)
