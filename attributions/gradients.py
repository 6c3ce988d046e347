"""Gradient-based post-hoc methods from Captum, applied to the model as it is (no explanation mode)."""

from __future__ import annotations

from typing import ClassVar

import captum.attr as ca
import torch
from captum.attr._utils.approximation_methods import approximation_parameters
from torch import Tensor

from faithbench.attributions.base import (
    AUTO,
    DEFAULT_MAX_BATCH,
    AttributionMethod,
    Capabilities,
    cancelling_sum,
    module_by_name,
    one_pass,
)
from faithbench.attributions.coverage import (
    DEEPLIFT_MODULES,
    GUIDED_BACKPROP_MODULES,
    internal_softmax,
    reused,
    uncovered,
)
from faithbench.attributions.shared_forward import grads_per_row
from faithbench.models.adapter import ModelAdapter

CPU_PASS_ROWS = 64  # IG's rows per pass within the CPU's calls (internal_batch_size = auto)


def _leaf(inputs: Tensor) -> Tensor:
    """A fresh leaf requiring grad (else Captum sets it on the caller's tensor, with a warning)."""
    return inputs.detach().clone().requires_grad_(True)


def input_gradients(
    model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
) -> Tensor:
    """d logit_t / dx of every row (B, ...), one forward pass of the distinct inputs (``shared_forward``)."""
    x = _leaf(distinct)
    with torch.enable_grad():
        return grads_per_row(model.module(x), [x], inverse, occurrence, targets)[0][0]


class Gradient(AttributionMethod):
    name = "gradient"
    description = "Captum Saliency: d logit_t / dx (signed, abs=False as in the B-cos code)"
    capabilities = Capabilities(text=True)
    defaults: ClassVar[dict] = {"abs": False}
    model_inputs_per_explanation = one_pass

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return ca.Saliency(model.module).attribute(_leaf(inputs), target=targets, abs=self.params["abs"])

    def shares_forward(self, model: ModelAdapter) -> bool:
        return True

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        grad = input_gradients(model, distinct, inverse, occurrence, targets)
        return grad.abs() if self.params["abs"] else grad


class InputXGradient(AttributionMethod):
    name = "input_x_gradient"
    description = "Captum InputXGradient: x * d logit_t / dx (dynamic weights NOT detached)"
    capabilities = Capabilities(text=True)
    model_inputs_per_explanation = one_pass

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return ca.InputXGradient(model.module).attribute(_leaf(inputs), target=targets)

    def shares_forward(self, model: ModelAdapter) -> bool:
        return True

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        return distinct[inverse] * input_gradients(model, distinct, inverse, occurrence, targets)


class IntegratedGradients(AttributionMethod):
    name = "integrated_gradients"
    description = "Captum IntegratedGradients from a constant baseline (default 0 in model-input space)"
    capabilities = Capabilities(text=True)
    defaults: ClassVar[dict] = {
        "n_steps": 50,
        "baseline": 0.0,
        # (step, input) rows per pass, at most max_batch; auto: 64 within the CPU's calls (3x faster there than all
        # at once), max_batch where the calls are larger (a GPU's, sized from its memory)
        "internal_batch_size": AUTO,
        "method": "gausslegendre",
    }
    choices: ClassVar[dict] = {
        "method": ("gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid")
    }
    cost_params: ClassVar[frozenset[str]] = frozenset({"internal_batch_size"})

    completeness = "logit(x) - logit(baseline)"
    completeness_inputs = 2

    def model_inputs_per_explanation(self, model: ModelAdapter) -> int:
        return self.params["n_steps"]  # one forward and backward pass per step

    def model_calls(self, inputs: int, per_input: int, max_batch: int) -> int:
        # Captum's passes (and the shared forward's): internal_batch_size // inputs steps each, at least one
        steps_per_call = max(1, self.pass_rows(max_batch) // max(1, inputs))
        return -(-self.params["n_steps"] // steps_per_call) if inputs else 0

    def pass_rows(self, max_batch: int) -> int:
        """(step, input) rows per pass under a call's ``max_batch`` (``internal_batch_size``)."""
        rows = self.params["internal_batch_size"]
        if rows == AUTO:
            rows = CPU_PASS_ROWS if max_batch <= DEFAULT_MAX_BATCH else max_batch
        return min(rows, max_batch)

    def completeness_target(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        """IG's completeness axiom: the maps sum to f_t(x) - f_t(baseline)."""
        t = targets.long().view(-1, 1)
        with torch.no_grad():
            at_x = model.module(inputs).gather(1, t)
            at_baseline = model.module(torch.full_like(inputs, self.params["baseline"])).gather(1, t)
        return (at_x - at_baseline).squeeze(1)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        p = self.params
        return ca.IntegratedGradients(model.module).attribute(
            _leaf(inputs),
            baselines=p["baseline"],
            target=targets,
            n_steps=p["n_steps"],
            internal_batch_size=self.pass_rows(self.max_batch),
            method=p["method"],
        )

    def shares_forward(self, model: ModelAdapter) -> bool:
        return True

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        """Captum's computation (the same alphas and step sizes, steps in passes of ``internal_batch_size`` rows),
        each pass's forward shared by the targets of equal inputs."""
        p = self.params
        sizes_of, alphas_of = approximation_parameters(p["method"])
        sizes, alphas = sizes_of(p["n_steps"]), alphas_of(p["n_steps"])
        base = torch.full_like(distinct, p["baseline"])
        per_pass = max(1, self.pass_rows(self.max_batch) // distinct.shape[0])
        total = torch.zeros_like(distinct[inverse])
        shape = (-1, *([1] * distinct.dim()))
        for s in range(0, len(alphas), per_pass):
            alpha = torch.tensor(alphas[s : s + per_pass], dtype=distinct.dtype, device=distinct.device).view(shape)
            x = (base + alpha * (distinct - base)).flatten(0, 1).requires_grad_(True)
            with torch.enable_grad():
                (grads,) = grads_per_row(model.module(x), [x], inverse, occurrence, targets)
            weight = torch.tensor(sizes[s : s + per_pass]).float().to(grads.device).view(shape)
            total += (grads * weight).sum(dim=0)
        return total * (distinct - base)[inverse]


_PLAIN = "the plain gradient (method 'gradient')"


class GuidedBackprop(AttributionMethod):
    """Refuses models without an ``nn.ReLU`` module (the maps would be the plain gradient). With ReLU
    modules beside other nonlinearities (a B-cosified CNN's B-cos layers, functional ReLUs), only the
    ReLU modules are guided and the rest pass their plain gradient (:mod:`faithbench.attributions.coverage`)."""

    name = "guided_backprop"
    description = (
        "Captum GuidedBackprop: nn.ReLU modules pass only positive gradients, other nonlinearities their "
        "plain gradient; refuses models without nn.ReLU modules"
    )
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        why = uncovered(model.module, GUIDED_BACKPROP_MODULES, False, "guided backprop rewrites gradients", _PLAIN)
        if why:
            self._unsupported(model, why)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return ca.GuidedBackprop(model.module).attribute(_leaf(inputs), target=targets)


class DeepLift(AttributionMethod):
    """Refuses models without a module its rules cover (ReLU, ELU, LeakyReLU, Sigmoid, Tanh, Softplus,
    MaxPool; the maps would be (x - baseline) x gradient) and models with an ``nn.Softmax`` module
    (Captum's softmax rule mixes the samples of a batch; every ViT here) or one that calls a covered module more than
    once per forward (torchvision's ResNets; read from its torch.fx trace). On models that mix covered
    modules with other nonlinearities (a B-cosified CNN's ReLUs beside its B-cos layers) the rules apply
    at the covered modules and the rest passes its plain gradient: a hybrid
    (:mod:`faithbench.attributions.coverage`)."""

    name = "deeplift"
    description = (
        "Captum DeepLift (rescale rule) from a constant baseline (default 0) at ReLU/ELU/LeakyReLU/Sigmoid/"
        "Tanh/Softplus/MaxPool modules, plain gradient elsewhere; refuses models with none or with nn.Softmax"
    )
    defaults: ClassVar[dict] = {"baseline": 0.0}
    inputs_per_call = 2  # Captum's DeepLift runs the inputs and their baselines in one forward pass
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        zero = self.params["baseline"] == 0
        would_be = "input x gradient (method 'input_x_gradient')" if zero else "(x - baseline) x gradient"
        why = internal_softmax(model.module) or uncovered(
            model.module, DEEPLIFT_MODULES, True, "DeepLift applies its rules", would_be
        )
        why = why or reused(model.module, DEEPLIFT_MODULES, True)
        if why:
            self._unsupported(model, why)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return ca.DeepLift(model.module).attribute(_leaf(inputs), baselines=self.params["baseline"], target=targets)


class GradCam(AttributionMethod):
    name = "gradcam"
    description = "Captum LayerGradCam on the model's last convolutional block, ReLU, upsampled to the input"
    capabilities = Capabilities(vit=False, needs_layer=True, coarse=True)
    defaults: ClassVar[dict] = {"relu": True, "upsample": "nearest"}
    choices: ClassVar[dict] = {"upsample": ("nearest", "bilinear", "bicubic", "area")}
    model_inputs_per_explanation = one_pass

    def _check(self, model: ModelAdapter) -> None:
        module_by_name(model.module, model.conv_layer)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        rows = torch.arange(len(inputs), device=inputs.device)
        return self._attribute_shared(model, inputs, rows, torch.zeros_like(rows), targets)

    def shares_forward(self, model: ModelAdapter) -> bool:
        return True

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        """Captum's LayerGradCam (spatially averaged layer gradients times the layer's output, summed over
        channels), the layer's output of one forward pass differentiated for every row's target. A location whose
        channel terms cancel to rounding is 0 (:func:`~faithbench.attributions.base.cancelling_sum`), before the
        ReLU: its sign would be the kernels' (measured: 6 of 48 truth-tier GradCAM maps of ``truth_additive``
        moved their truth correlation by up to 0.29 under ATen's native kernels and one thread)."""
        acts: list[Tensor] = []
        hook = module_by_name(model.module, model.conv_layer).register_forward_hook(lambda m, i, o: acts.append(o))
        try:
            with torch.enable_grad():
                out = model.module(_leaf(distinct))
        finally:
            hook.remove()
        if len(acts) != 1 or not isinstance(acts[0], Tensor):
            raise RuntimeError(f"layer {model.conv_layer!r} must return one tensor in one call per forward pass")
        (grads,) = grads_per_row(out, acts, inverse, occurrence, targets)
        weights = grads[0].mean(dim=tuple(range(2, grads[0].dim())), keepdim=True)
        cam = cancelling_sum(weights * acts[0].detach()[inverse], dim=1)
        cam = torch.relu(cam) if self.params["relu"] else cam
        return ca.LayerAttribution.interpolate(
            cam, tuple(distinct.shape[-2:]), interpolate_mode=self.params["upsample"]
        )
