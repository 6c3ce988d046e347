"""Pairs of methods whose maps are equal by mathematics on some models: not defects, but worth stating.

The runner flags any two methods whose maps agree on a model (``bench.identity``); a flagged pair
that one of these identities explains is reported as expected, with its reason, any other as
unexpected. Whether a model meets an identity's premise is judged from its module types alone
(before or without compute): a model with custom forward code is never recognised, so a true
identity on it would be reported as unexpected -- the safe direction for a tripwire.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from bcos.modules import BcosConv2d, BcosLinear, LogitLayer
from bcos.modules.norms.uncentered_norms import BatchNormUncentered2d
from torch import nn

from faithbench.models.adapter import ModelAdapter

# Modules that are positively homogeneous of degree 1, m(a x) = a m(x) for a > 0, when bias-free:
# linear maps, ReLU gates, pooling, uncentered BatchNorm (x / std * w), and B-cos layers, whose
# dynamic scale |cos(x, w)|^(B-1) is scale-invariant (up to the epsilon in its norms).
_HOMOGENEOUS = (
    nn.Sequential,
    nn.Linear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    BcosConv2d,
    BcosLinear,
    BatchNormUncentered2d,
    nn.ReLU,
    nn.LeakyReLU,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.Flatten,
    nn.Identity,
    nn.Dropout,
    LogitLayer,  # a temperature and a constant logit offset: gradients and the identities below keep
)
_PIECEWISE_LINEAR = tuple(t for t in _HOMOGENEOUS if t not in (BcosConv2d, BcosLinear))


def _only(module: nn.Module, types: tuple[type[nn.Module], ...], bcos_b: float | None = None) -> bool:
    """Every module of the tree is one of ``types`` and has no non-zero bias (and B-cos layers have B = ``bcos_b``)."""
    for m in module.modules():
        if not isinstance(m, types):
            return False
        if bcos_b is not None and isinstance(m, (BcosConv2d, BcosLinear)) and float(m.b) != bcos_b:
            return False
        bias = getattr(m, "bias", None)  # a B-cos layer's ``bias`` is a flag (False), not a tensor
        if isinstance(bias, torch.Tensor) and bool(bias.detach().ne(0).any()):
            return False
    return True


def positively_homogeneous(module: nn.Module) -> bool:
    """f(a x) = a f(x) + c for a > 0 (c: a constant logit offset), judged from the module types."""
    return _only(module, _HOMOGENEOUS)


def bias_free_piecewise_linear(module: nn.Module) -> bool:
    """Bias-free ReLU / pooling networks: f(x) = W(x) x with W(x) constant on linear regions."""
    return _only(module, _PIECEWISE_LINEAR)


def bias_free_linear_bcos(module: nn.Module) -> bool:
    """Bias-free B-cos networks with B = 1: each layer is linear (MaxOut: the max of linear units), so the
    network is piecewise linear and f(x) = W(x) x with W(x) constant on linear regions."""
    return _only(module, _HOMOGENEOUS, bcos_b=1.0)


def _piecewise_linear(model: ModelAdapter) -> bool:
    return bias_free_piecewise_linear(model.module) or bias_free_linear_bcos(model.module)


Params = dict[str, dict[str, Any]]  # method name -> its parameters


@dataclass(frozen=True)
class KnownIdentity:
    """Methods ``pair`` (either order) give equal maps on the models and parameters where ``holds`` is true."""

    pair: tuple[str, str]
    reason: str
    holds: Callable[[ModelAdapter, Params], bool]


def _zero_baseline(method: str) -> Callable[[ModelAdapter, Params], bool]:
    return lambda model, params: params[method].get("baseline", 0.0) == 0


def _lrp0(params: Params) -> bool:
    return params["lrp"].get("composite") == "epsilon"


KNOWN_IDENTITIES: tuple[KnownIdentity, ...] = (
    KnownIdentity(
        ("integrated_gradients", "input_x_gradient"),
        "IntegratedGradients from a zero baseline equals InputXGradient on positively homogeneous models "
        "(f(a x) = a f(x), e.g. bias-free B-cos networks): the gradient is constant along the path a x",
        lambda model, params: (
            _zero_baseline("integrated_gradients")(model, params) and positively_homogeneous(model.module)
        ),
    ),
    KnownIdentity(
        ("lrp", "native"),
        "LRP-0 (composite 'epsilon') through a B-cos model's dynamic linear map W(x) is W(x)x",
        lambda model, params: _lrp0(params) and model.family == "bcos",
    ),
    KnownIdentity(
        ("lrp", "input_x_gradient"),
        "LRP-0 (composite 'epsilon') equals InputXGradient on bias-free ReLU networks (Ancona et al., 2018)",
        lambda model, params: _lrp0(params) and bias_free_piecewise_linear(model.module),
    ),
    KnownIdentity(
        ("native", "input_x_gradient"),
        "W(x)x equals InputXGradient on bias-free piecewise-linear networks (ReLU networks, B-cos networks "
        "with B = 1): the only dynamic factors are gates, whose gradient is zero almost everywhere",
        lambda model, params: _piecewise_linear(model),
    ),
    KnownIdentity(
        ("native", "integrated_gradients"),
        "W(x)x equals IntegratedGradients from a zero baseline on bias-free piecewise-linear networks "
        "(ReLU networks, B-cos networks with B = 1): W(a x) = W(x) along the path a x",
        lambda model, params: _zero_baseline("integrated_gradients")(model, params) and _piecewise_linear(model),
    ),
    KnownIdentity(
        ("gradient", "guided_backprop"),
        "both maps are 0 on a B-cosified model: its first layer is (W, -W) / 2 on [x, 1 - x], so the two channels' "
        "gradients (plain or guided) are equal and opposite and their channel sum cancels (base.channel_sum)",
        lambda model, params: model.family in ("bcosified", "aloe") and getattr(model.encoding, "add_inverse", False),
    ),
    KnownIdentity(
        ("deeplift", "truth"),
        "DeepLift from the zero baseline is the exact attribution of the hand-set additive patch models (one ReLU "
        "per cell and channel: the rescale rule's multiplier is the secant slope, the Aumann-Shapley share)",
        lambda model, params: _zero_baseline("deeplift")(model, params) and model.truth is not None,
    ),
)


def known_identity(model: ModelAdapter, params: Params) -> str | None:
    """The reason two methods (the keys of ``params``, with their parameters) agree on ``model``, if known."""
    for identity in KNOWN_IDENTITIES:
        if set(identity.pair) == set(params) and identity.holds(model, params):
            return identity.reason
    return None
