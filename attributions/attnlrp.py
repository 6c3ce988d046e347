"""AttnLRP (Achtibat et al., ICML 2024) for ViTs, through the authors' ``lxt`` package.

lxt's efficient implementation writes LRP as gradient x input with modified gradients. Its recipe for
torchvision ViTs (``lxt.efficient.models.vit_torch.cp_LRP``, the one lxt ships for images):

- GELU: the identity rule (relevance passes the non-linearity unchanged);
- LayerNorm: the identity rule (the standard deviation is a constant);
- attention: CP-LRP (no relevance through the query and key, i.e. the softmax), so relevance flows
  through the values only;
- Conv2d / Linear: zennit's Gamma rule (``conv_gamma``, ``linear_gamma``), with zennit's hooks turned
  into gradient x input by ``lxt.efficient.monkey_patch_zennit``.

The ``bcos`` package's ViT blocks (the zoo's and the hub's SimpleViTs), which lxt cannot patch, get the
same rules on our modules: their ``DetachableModule`` flags are exactly lxt's ``stop_gradient`` rules --
q / k of ``Attention`` (CP-LRP), the LayerNorm standard deviation, a B-cos layer's dynamic scale (lxt's
rule for gates) and the B-cosified GELU gate (Phi(x) = gelu(x) / x, the identity rule). On a bias-free
B-cos ViT AttnLRP with ``linear_gamma = conv_gamma = 0`` is therefore W(x)x.

lxt patches classes (``torch.nn.LayerNorm.forward``, zennit's ``BasicHook``...) process-wide; the
patches live only for the call and are undone after it, so every other method sees the stock modules.
lxt 2.1's package initialisers import its copies of transformers 4's BERT and LLM code, which fail under
transformers 5 (removed names); the ViT recipe needs none of it, so :func:`lxt_modules` loads the modules it
needs on their own when that import fails (the same code, with either major of transformers).
Conservation: relevance is conserved layer by layer except for what biases absorb, the positional
embedding and [CLS] token (constants, not pixels) and the Gamma rule's stabiliser; the rows' ``claim``
is the logit, and the ``completeness_gap`` metric measures the rest.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import ClassVar

import torch
from bcos.common import explanation_mode
from torch import Tensor, nn

from faithbench.attributions.base import AttributionMethod, Capabilities, one_pass
from faithbench.attributions.rollout import attention_modules
from faithbench.models.adapter import ModelAdapter

_PATCHED_ATTRIBUTES = ("forward", "backward", "original_forward")


def lxt_modules() -> tuple[ModuleType, ModuleType]:
    """lxt's zennit patch and its torchvision-ViT recipe (``lxt.efficient.zennit_patches``,
    ``lxt.efficient.models.vit_torch``). If lxt's package initialisers fail (transformers 5), the two modules and
    what they import (``patches``, ``rules``) are loaded under their own names with their packages' initialisers
    skipped; the unexecuted package shells leave ``sys.modules`` again, so a later ``import lxt.efficient``
    behaves as it would without faithbench."""
    try:
        from lxt.efficient import zennit_patches
        from lxt.efficient.models import vit_torch

        return zennit_patches, vit_torch
    except ImportError:
        pass
    shells = []
    for package in ("lxt.efficient", "lxt.efficient.models"):
        if package not in sys.modules:
            sys.modules[package] = importlib.util.module_from_spec(importlib.util.find_spec(package))
            shells.append(package)
    try:
        return importlib.import_module("lxt.efficient.zennit_patches"), importlib.import_module(
            "lxt.efficient.models.vit_torch"
        )
    finally:
        for package in shells:
            sys.modules.pop(package, None)


@contextlib.contextmanager
def lxt_rules() -> Iterator[None]:
    """lxt's ViT patches (GELU, LayerNorm, MultiheadAttention) and its zennit patch, undone on exit."""
    from zennit.core import BasicHook

    zennit_patches, vit_torch = lxt_modules()
    classes = [*vit_torch.cp_LRP, BasicHook]
    saved = {cls: {a: cls.__dict__[a] for a in _PATCHED_ATTRIBUTES if a in cls.__dict__} for cls in classes}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lxt warns when a class is patched already (nested calls)
            for target, patch in vit_torch.cp_LRP.items():  # lxt's monkey_patch with this map (False: patched already)
                patch(target)
            zennit_patches.monkey_patch_zennit()
        yield
    finally:
        for cls, attrs in saved.items():
            for a in _PATCHED_ATTRIBUTES:
                if a in attrs:
                    setattr(cls, a, attrs[a])
                elif a in cls.__dict__:
                    delattr(cls, a)


def gamma_composite(conv_gamma: float, linear_gamma: float):
    """zennit's Gamma rule at every Conv2d and Linear (lxt's ViT recipe; register it inside :func:`lxt_rules`)."""
    import zennit.rules as rules
    from zennit.composites import LayerMapComposite

    return LayerMapComposite([(nn.Conv2d, rules.Gamma(conv_gamma)), (nn.Linear, rules.Gamma(linear_gamma))])


class AttnLrp(AttributionMethod):
    name = "attnlrp"
    description = "AttnLRP via lxt (CP-LRP attention, identity rule on GELU / LayerNorm, Gamma on linear layers)"
    capabilities = Capabilities(cnn=False)
    unsupported_note = " (use 'lrp' for CNNs)"
    # lxt's ViT example sweeps conv_gamma over 0.1 / 0.25 / 100 and linear_gamma over 0 .. 1; these are its
    # middle values. 0 / 0 is LRP-0 with lxt's rules (on bias-free B-cos ViTs: W(x)x).
    defaults: ClassVar[dict] = {"conv_gamma": 0.25, "linear_gamma": 0.05}
    completeness = "logit"
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        if not attention_modules(model.module):
            self._unsupported(model, "lxt's rules need bcos-style Attention blocks or nn.MultiheadAttention")

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        composite = gamma_composite(float(self.params["conv_gamma"]), float(self.params["linear_gamma"]))
        x = inputs.detach().clone().requires_grad_(True)
        with lxt_rules(), explanation_mode(model.module), torch.enable_grad():
            composite.register(model.module)
            try:
                logits = model.module(x)
                selected = logits.gather(1, targets.view(-1, 1)).sum()
                (grad,) = torch.autograd.grad(selected, x)
            finally:
                composite.remove()
        return (x * grad).detach()
