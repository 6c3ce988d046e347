"""The limit of each attribution method in ``python -m bench perf``: the cheapest way to do the model work the
method cannot avoid, timed in turns with it (:mod:`faithbench.bench.perf.timing`), so its ratio is at least 1 up
to noise. Every limit works on the method's own chunks of the batch (``max_batch`` inputs per call, as
``AttributionMethod.attribute`` cuts them), builds its inputs outside the timed function, and does nothing but
the model's passes:

* ``gradient``, ``input_x_gradient`` (:func:`forward_backward`): one forward + backward per chunk, the gradient
  of the summed target logits with respect to the input (``torch.autograd.grad``), in the model's normal mode;
* ``native``, ``native_normalised`` (:func:`explanation_forward_backward`): the same in the model's explanation
  mode (B-cos: dynamic factors detached, as ``models.adapter.input_x_gradient(..., explanation=True)``);
  ``native_normalised`` from the normalised input, as the method;
* ``gradcam`` (:func:`layer_forward_backward`): one forward + backward from the target logits to the output of
  the model's ``conv_layer``. Captum's LayerGradCam differentiates with respect to that layer, never the input:
  a backward to the input is work GradCAM does not do (single timings put it at 0.5 to 0.7 of GradCAM's cost);
* ``integrated_gradients`` (:func:`integrated_forward_backward`): ``n_steps`` forward + backward of the scaled
  inputs ``baseline + alpha (x - baseline)`` at the method's alphas, in passes of its ``internal_batch_size``
  (Captum's batching: ``internal_batch_size // chunk`` steps per pass), i.e. n_steps x one gradient;
* ``lrp`` (:func:`lrp_forward_backward`): one forward + backward per chunk with the method's zennit composite
  registered (its canonizers and the rules' hooks; on B-cos models its split layers in explanation mode).
  Registering the composite is part of the limit: no LRP with those rules avoids it; the limit registers it
  once for all chunks;
* ``lime``, ``shapley_sampling`` (:func:`forward_passes`): the forward passes the method makes (its model
  calls' inputs, recorded by ``CallCounter`` in an untimed run) replayed under ``torch.no_grad``, as the
  metrics' limit. Segmentation, sampling, the surrogate fit and the Shapley bookkeeping are the method's own work.

``LIMITS`` maps each method to its limit; :func:`method_limit` builds one, :func:`explained_limit` that of a metric
which explains again (the method's limit on what it explains).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from bcos.common import explanation_mode
from captum.attr._utils.approximation_methods import approximation_parameters
from torch import Tensor, nn

from faithbench.attributions.base import AttributionMethod, module_by_name
from faithbench.attributions.native import split_input_normalization
from faithbench.bench.perf.timing import Probe, replay
from faithbench.models.adapter import ModelAdapter


@dataclass(frozen=True)
class Limit:
    """The timed function of a limit and what it does (the limit row's note)."""

    run: Callable[[], object]
    note: str


@dataclass(frozen=True)
class Work:
    """What a limit is built from: the model, the method (its parameters), the batch, the method's chunk size
    and the inputs of the model calls one run of the method made (recorded by ``timing.probe``)."""

    model: ModelAdapter
    method: AttributionMethod
    inputs: Tensor
    targets: Tensor
    max_batch: int
    calls: tuple[Tensor, ...]

    def chunks(self) -> list[tuple[Tensor, Tensor]]:
        """The (inputs, targets) chunks ``AttributionMethod.attribute`` explains one at a time."""
        step = self.max_batch // self.method.inputs_per_call
        n = self.inputs.shape[0]
        return [(self.inputs[s : s + step].detach(), self.targets[s : s + step]) for s in range(0, n, step)]


def _per_chunk(chunks: list) -> str:
    return f" per chunk ({len(chunks)})" if len(chunks) > 1 else ""


def input_gradient(module: nn.Module, x: Tensor, targets: Tensor) -> Tensor:
    """d (sum of the target logits) / d x: one forward and one backward of the batch ``x``."""
    leaf = x.detach().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(module(leaf).gather(1, targets.view(-1, 1)).sum(), leaf)
    return grad


def forward_backward(work: Work) -> Limit:
    chunks, module = work.chunks(), work.model.module

    def run() -> None:
        for x, t in chunks:
            input_gradient(module, x, t)

    return Limit(run, f"one forward + backward (d target logit / d input){_per_chunk(chunks)}")


def explanation_forward_backward(work: Work) -> Limit:
    module, chunks = work.model.module, work.chunks()
    parts = split_input_normalization(module) if work.method.params.get("wrt") == "normalised-input" else None
    if parts is not None:  # native_normalised: the contributions of layer 0's output
        with torch.no_grad():
            chunks = [(parts[0](x), t) for x, t in chunks]
        module = parts[1]

    def run() -> None:
        with explanation_mode(module):
            for x, t in chunks:
                input_gradient(module, x, t)

    return Limit(run, f"one forward + backward in explanation mode{_per_chunk(chunks)}")


def layer_forward_backward(work: Work) -> Limit:
    module, chunks = work.model.module, work.chunks()
    layer = module_by_name(module, work.model.conv_layer)

    def run() -> None:
        acts: list[Tensor] = []
        for x, t in chunks:
            acts.clear()
            hook = layer.register_forward_hook(lambda m, i, o: acts.append(o))
            try:
                with torch.enable_grad():
                    out = module(x)
            finally:
                hook.remove()
            with torch.enable_grad():
                torch.autograd.grad(out.gather(1, t.view(-1, 1)).sum(), acts[0])

    layer_name = work.model.conv_layer
    return Limit(run, f"one forward + backward to layer {layer_name!r}, not to the input{_per_chunk(chunks)}")


def integrated_forward_backward(work: Work) -> Limit:
    p = work.method.params
    alphas = approximation_parameters(p["method"])[1](p["n_steps"])
    passes = []
    for x, t in work.chunks():
        per_pass = max(1, work.method.pass_rows(work.max_batch) // x.shape[0])
        base = torch.full_like(x, p["baseline"])
        for s in range(0, len(alphas), per_pass):
            alpha = torch.tensor(alphas[s : s + per_pass], dtype=x.dtype, device=x.device)
            scaled = base + alpha.view(-1, *([1] * x.dim())) * (x - base)
            passes.append((scaled.flatten(0, 1).contiguous(), t.repeat(len(alpha))))
    module = work.model.module

    def run() -> None:
        for x, t in passes:
            input_gradient(module, x, t)

    n_passes = f"{len(passes)} pass" + ("es" if len(passes) > 1 else "")
    return Limit(run, f"{p['n_steps']} steps x one forward + backward, in {n_passes}")


def lrp_forward_backward(work: Work) -> Limit:
    chunks, module, method = work.chunks(), work.model.module, work.method

    def run() -> None:
        split, make_composite = method._composite(work.model)  # noqa: SLF001 - the method's own rules
        with split, make_composite().context(module) as hooked:
            for x, t in chunks:
                input_gradient(hooked, x, t)

    rules = method.params["composite"]
    return Limit(run, f"one forward + backward with the {rules} rules' hooks{_per_chunk(chunks)}")


def forward_passes(work: Work) -> Limit:
    n = sum(x.shape[0] for x in work.calls)
    note = f"its {len(work.calls)} model call(s) ({n} inputs) alone, no_grad"
    return Limit(replay(work.model.module, work.calls), note)


LIMITS: dict[str, Callable[[Work], Limit]] = {
    "gradient": forward_backward,
    "input_x_gradient": forward_backward,
    "native": explanation_forward_backward,
    "native_normalised": explanation_forward_backward,
    "gradcam": layer_forward_backward,
    "integrated_gradients": integrated_forward_backward,
    "lrp": lrp_forward_backward,
    "lime": forward_passes,
    "shapley_sampling": forward_passes,
}


def method_limit(work: Work) -> Limit | None:
    """The limit of ``work.method``; None for a method without one (its row gets no ratio) and for a model that
    brings its own native explainer (ALOE from the Hub: its explainer is not these passes)."""
    build = LIMITS.get(work.method.name)
    if build is None or (build is explanation_forward_backward and work.model.native_explainer is not None):
        return None
    return build(work)


def explained_limit(
    model: ModelAdapter,
    method: AttributionMethod,
    max_batch: int,
    batches: tuple[tuple[Tensor, Tensor], ...],
    first: Probe,
) -> Limit | None:
    """The limit of a metric that explains ``batches`` (inputs, targets) one after the other: the method's limit on
    each in turn (a method whose limit replays its model calls: those of the metric's whole run (``first``), once)."""
    if LIMITS.get(method.name) is forward_passes:
        return method_limit(Work(model, method, *batches[0], max_batch, first.inputs))
    parts = [method_limit(Work(model, method, x, t, max_batch, ())) for x, t in batches]
    if any(p is None for p in parts):
        return None
    if len(parts) == 1:
        return parts[0]

    def run() -> None:
        for part in parts:
            part.run()

    return Limit(run, f"{len(parts)} batches in turn: " + "; ".join(p.note for p in parts if p is not None))
