"""Layer-wise relevance propagation with zennit composites (CNNs built from standard layers)."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from bcos.modules import DetachableModule
from torch import Tensor, nn
from zennit.attribution import Gradient as ZennitGradient
from zennit.canonizers import SequentialMergeBatchNorm
from zennit.composites import EpsilonAlpha2Beta1Flat, EpsilonPlus, EpsilonPlusFlat
from zennit.torchvision import ResNetCanonizer

from attributions.base import AttributionMethod, Capabilities
from models.adapter import ModelAdapter

COMPOSITES = {
    "epsilon_plus_flat": EpsilonPlusFlat,
    "epsilon_plus": EpsilonPlus,
    "epsilon_alpha2_beta1_flat": EpsilonAlpha2Beta1Flat,
}

# Layers zennit's composites have rules for (or that LRP passes through unchanged).
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
)


class LRP(AttributionMethod):
    name = "lrp"
    description = (
        "zennit LRP, composite EpsilonPlusFlat by default (BatchNorm merged into the preceding layer)"
    )
    capabilities = Capabilities(vit=False)
    unsupported_note = " (ViTs need AttnLRP, from the lxt package, which is not integrated yet)"
    defaults: ClassVar[dict] = {"composite": "epsilon_plus_flat"}

    def _check(self, model: ModelAdapter) -> None:
        if self.params["composite"] not in COMPOSITES:
            raise ValueError(
                f"unknown LRP composite {self.params['composite']!r}; valid: {', '.join(COMPOSITES)}"
            )
        dynamic = {type(m).__name__ for m in model.module.modules() if isinstance(m, DetachableModule)}
        if dynamic:
            self._unsupported(
                model,
                f"zennit's rules do not cover the dynamic scale of B-cos layers "
                f"({', '.join(sorted(dynamic))}); explain B-cos models natively or post hoc "
                "with another method",
            )
        leaves = {
            type(m).__name__
            for m in model.module.modules()
            if not list(m.children()) and not isinstance(m, _SUPPORTED)
        }
        if leaves:
            self._unsupported(model, f"zennit has no LRP rules for its layers {', '.join(sorted(leaves))}")

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        canonizers = [SequentialMergeBatchNorm()]
        if any(type(m).__name__ in ("BasicBlock", "Bottleneck") for m in model.module.modules()):
            canonizers = [ResNetCanonizer()]
        composite = COMPOSITES[self.params["composite"]](canonizers=canonizers)
        with torch.enable_grad(), ZennitGradient(model.module, composite) as attributor:
            logits = model.module(inputs[:1])
            one_hot = F.one_hot(targets, logits.shape[1]).to(inputs.dtype)
            _, relevance = attributor(inputs, one_hot)
        return relevance
