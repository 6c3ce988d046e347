"""Layer-wise relevance propagation with zennit composites, for standard and B-cos CNNs.

Standard CNNs: BatchNorm is merged into the preceding layer by zennit's canonizers. B-cos CNNs:
LRP runs in explanation mode and every B-cos layer ``y = s(x) * (w . x)`` is split into its linear
part, which gets the composite's rule, and its dynamic scale s (a constant there), through which
relevance passes unchanged -- LRP on the dynamic linear map W(x). The initial relevance is the
target's logit minus the model's constant logit bias, so relevance is in logit units and LRP-0
(``composite="epsilon"`` with a tiny epsilon) reproduces W(x)x on B-cos models and input x gradient
on bias-free ReLU nets (tested).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import MethodType
from typing import ClassVar

import torch
import torch.linalg as LA
import torch.nn.functional as F
from bcos.common import explanation_mode
from bcos.modules import BcosConv2d, BcosLinear, LogitLayer
from torch import Tensor, nn
from zennit.attribution import Gradient as ZennitGradient
from zennit.canonizers import SequentialMergeBatchNorm
from zennit.composites import (
    EpsilonAlpha2Beta1Flat,
    EpsilonPlus,
    EpsilonPlusFlat,
    LayerMapComposite,
    layer_map_base,
)
from zennit.rules import Epsilon, Pass
from zennit.torchvision import ResNetCanonizer
from zennit.types import Convolution

from faithbench.attributions.base import AttributionMethod, Capabilities, one_pass
from faithbench.attributions.shared_forward import grads_per_row
from faithbench.models.adapter import ModelAdapter
from faithbench.models.bcosify import InputNormalization
from faithbench.registry import Registry


def _epsilon_composite(epsilon: float, layer_map: list, canonizers: list) -> LayerMapComposite:
    rules = [(Convolution, Epsilon(epsilon=epsilon)), (nn.Linear, Epsilon(epsilon=epsilon))]
    return LayerMapComposite(layer_map + layer_map_base(epsilon) + rules, canonizers=canonizers)


COMPOSITES: Registry = Registry("LRP composite")
for _name, _build in {
    "epsilon_plus_flat": lambda eps, layer_map, canonizers: EpsilonPlusFlat(
        epsilon=eps, layer_map=layer_map, canonizers=canonizers
    ),
    "epsilon_plus": lambda eps, layer_map, canonizers: EpsilonPlus(
        epsilon=eps, layer_map=layer_map, canonizers=canonizers
    ),
    "epsilon_alpha2_beta1_flat": lambda eps, layer_map, canonizers: EpsilonAlpha2Beta1Flat(
        epsilon=eps, layer_map=layer_map, canonizers=canonizers
    ),
    "epsilon": _epsilon_composite,
}.items():
    COMPOSITES.register(_name, _build)

# Leaf layers LRP handles: zennit rules, pass-through, or constants.
_SUPPORTED = (
    nn.Conv2d,
    nn.Linear,
    nn.BatchNorm2d,
    nn.ReLU,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    nn.Dropout,
    nn.Identity,
    InputNormalization,
    LogitLayer,
)


class _ConstantScale(nn.Module):
    """``y = s * z``, the B-cos scale ``s`` set as a constant before each call (relevance passes)."""

    s: Tensor

    def forward(self, z: Tensor) -> Tensor:
        return self.s * z


def _split_bcos_forward(self: nn.Module, x: Tensor) -> Tensor:
    z = self.linear(x)
    if self.b == 1:
        return z
    if isinstance(self, BcosConv2d):
        norm = self.calc_patch_norms(x)
    else:
        norm = LA.vector_norm(x, dim=-1, keepdim=True) + 1e-12
    scale = z.abs() / norm if self.b == 2 else ((z / norm).abs() + 1e-6).pow(self.b - 1)
    self.lrp_scale.s = scale.detach()
    return self.lrp_scale(z)


@contextlib.contextmanager
def _bcos_layers_split(model: nn.Module) -> Iterator[None]:
    layers = [m for m in model.modules() if isinstance(m, BcosConv2d | BcosLinear)]
    for m in layers:
        m.lrp_scale = _ConstantScale()
        m.forward = MethodType(_split_bcos_forward, m)
    try:
        with explanation_mode(model):
            yield
    finally:
        for m in layers:
            del m.forward
            del m.lrp_scale


class LRP(AttributionMethod):
    name = "lrp"
    description = "zennit LRP (EpsilonPlusFlat by default); B-cos layers propagate through their dynamic linear map"
    capabilities = Capabilities(vit=False)
    unsupported_note = " (use 'attnlrp' for ViTs)"
    defaults: ClassVar[dict] = {"composite": "epsilon_plus_flat", "epsilon": 1e-6}
    completeness = "logit"  # relevance conservation from the initial relevance logit - logit_bias
    choices: ClassVar[dict] = {"composite": tuple(COMPOSITES)}
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        leaves = {
            type(m).__name__ for m in model.module.modules() if not list(m.children()) and not isinstance(m, _SUPPORTED)
        }
        if leaves:
            self._unsupported(model, f"zennit has no LRP rules for its layers {', '.join(sorted(leaves))}")
        maxout = [
            type(m).__name__ for m in model.module.modules() if isinstance(m, BcosConv2d | BcosLinear) and m.max_out > 1
        ]
        if maxout:
            self._unsupported(model, "B-cos layers with MaxOut are not supported")

    def _composite(
        self, model: ModelAdapter
    ) -> tuple[contextlib.AbstractContextManager, Callable[[], LayerMapComposite]]:
        """(the B-cos layers' split, the composite with its canonizers); build the composite inside the split."""
        canonizers = [SequentialMergeBatchNorm()]
        if any(type(m).__name__ in ("BasicBlock", "Bottleneck") for m in model.module.modules()):
            canonizers = [ResNetCanonizer()]
        layer_map = [(_ConstantScale, Pass()), (InputNormalization, Pass())]
        has_bcos = any(isinstance(m, BcosConv2d | BcosLinear) for m in model.module.modules())
        split = _bcos_layers_split(model.module) if has_bcos else contextlib.nullcontext()
        return split, lambda: COMPOSITES[self.params["composite"]](self.params["epsilon"], layer_map, canonizers)

    def shares_forward(self, model: ModelAdapter) -> bool:
        return True

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        """The relevance of every row's target from one forward pass with the composite's rules (a backward pass
        per occurrence through the same rule hooks)."""
        split, composite = self._composite(model)
        with split, torch.enable_grad(), composite().context(model.module) as module:
            x = distinct.detach().clone().requires_grad_(True)
            out = module(x)
            (relevance,) = grads_per_row(out, [x], inverse, occurrence, targets, seed=lambda o: o - model.logit_bias)
        return relevance[0]

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        split, make_composite = self._composite(model)
        with split, torch.enable_grad():
            composite = make_composite()
            one_hot = F.one_hot(targets, model.num_classes).to(inputs.dtype)
            with ZennitGradient(model.module, composite) as attributor:
                # Initial relevance: the target's logit minus the constant logit bias (logit units).
                _, relevance = attributor(inputs, lambda out: one_hot * (out - model.logit_bias))
        return relevance
