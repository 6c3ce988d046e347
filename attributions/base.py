"""The attribution-adapter interface: one class per method, declared capabilities, checked parameters.

An attribution method explains a batch of (input, target) pairs of a :class:`ModelAdapter`:

    maps = method.attribute(model, inputs, targets)     # (B, H, W) on the inputs' device; text: (B, T)

``inputs`` are model inputs (the adapter's encoding already applied), targets (B,) class indices.
Channel reduction: attributions are **summed over the input channels** (all 6 of a B-cos
[x, 1 - x] encoding; the D embedding dimensions of a token), the convention of the B-cos papers' GridPG
code. A map whose channel sum cancels to rounding is set to exactly 0 (:func:`channel_sum`): the plain gradient
of a B-cosified model, whose first layer is (W, -W) / 2 on [x, 1 - x], is zero in exact arithmetic and float
noise in practice. Methods that cannot explain
a model raise :class:`UnsupportedMethodError` from :meth:`AttributionMethod.check`, before any
compute is spent.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from faithbench.attributions.shared_forward import has_repeats, occurrences
from faithbench.calls import current_size, in_chunks
from faithbench.config import check_type
from faithbench.errors import ParameterError
from faithbench.models.adapter import ModelAdapter

CANCELLED_EPS = 100  # channel_sum: a map at most this many epsilons of its channels' magnitude is zero
DEFAULT_MAX_BATCH = 256  # inputs per model call unless the caller bounds it (suite key / --max-batch)
AUTO = "auto"  # a parameter's value chosen from the call's max_batch (a parameter whose default is auto, or a number)
_MAX_BATCH: contextvars.ContextVar[int] = contextvars.ContextVar("max_batch", default=DEFAULT_MAX_BATCH)


class UnsupportedMethodError(ValueError):
    """A method cannot explain a model (raised before any compute)."""


@dataclass(frozen=True)
class Capabilities:
    """What a method can explain and how it runs."""

    cnn: bool = True
    vit: bool = True
    text: bool = False
    needs_layer: bool = False  # needs ``model.conv_layer`` (GradCAM)
    needs_native: bool = False  # needs a B-cos / B-cosified / ALOE model
    seeded: bool = False  # random sampling, reproducible through ``seed``
    class_specific: bool = True  # False: the same map for every target (attention rollout)
    coarse: bool = False  # maps of low resolution upsampled (GradCAM): GridPG does not smooth them (TPAMI Sec. 4)
    ground_truth: bool = False  # maps come from a metric's ground truth (the oracle): only such metrics score it
    model_free: bool = False  # the maps never depend on the model (controls): recomputed, not stored, by rescore


def _rounding(dtype: torch.dtype, cancelled_eps: float) -> float:
    """``cancelled_eps`` epsilons of ``dtype``, at most float32's: the relative size below which a sum is rounding."""
    return cancelled_eps * min(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)


def channel_sum(maps: Tensor, cancelled_eps: float = CANCELLED_EPS) -> Tensor:
    """Per-feature maps (B, C, ...) summed over channels, with every map that cancels to rounding set to 0.

    ``m = sum_c a_c``; a sample whose ``max |m| <= cancelled_eps * eps * max sum_c |a_c|`` is zero to the dtype's
    precision (float32: 1.2e-5 of its channels' magnitude) and returned as exactly 0, so the metrics count it
    undefined (no mass) instead of scoring its rounding noise. ``eps`` is the dtype's, at most float32's: a half-
    precision map is never zeroed for a cancellation float32 would resolve. Measured: the gradient of the zoo's
    B-cosified models cancels to 1e-7 of its channels; every genuine map in the zoo is above 1e-2.
    """
    total = maps.sum(dim=1)
    if maps.shape[1] == 1 or not maps.is_floating_point():
        return total
    peak = total.abs().flatten(1).amax(dim=1)
    scale = maps.abs().sum(dim=1).flatten(1).amax(dim=1)
    cancelled = peak <= _rounding(maps.dtype, cancelled_eps) * scale
    return total.masked_fill(cancelled.view(-1, *(1,) * (total.dim() - 1)), 0)


def cancelling_sum(terms: Tensor, dim: int = 1, cancelled_eps: float = CANCELLED_EPS) -> Tensor:
    """``terms.sum(dim, keepdim=True)`` with every entry that cancels to rounding set to exactly 0.

    An entry is cancelled where ``|sum_k t_k| <= cancelled_eps * eps * sum_k |t_k|`` (``eps`` as in
    :func:`channel_sum`): a value that is 0 in exact arithmetic (a hand-set model's silent cell, terms that balance
    by construction) is otherwise whichever few ulps the kernels leave, with a sign that decides a ReLU and a rank
    that decides a removal curve, and that differ between kernels (CPU types, devices, thread counts).
    """
    total = terms.sum(dim=dim, keepdim=True)
    if not terms.is_floating_point():
        return total
    floor = _rounding(terms.dtype, cancelled_eps) * terms.abs().sum(dim=dim, keepdim=True)
    return total.masked_fill(total.abs() <= floor, 0)


class AttributionMethod:
    """Base class: subclasses set ``name``, ``description``, ``capabilities``, ``defaults`` and
    implement ``_attribute`` (and optionally ``_check``)."""

    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities] = Capabilities()
    defaults: ClassVar[dict[str, Any]] = {}  # every parameter and its default; values are type-checked against them
    choices: ClassVar[dict[str, tuple[Any, ...]]] = {}  # parameters with a fixed set of valid values
    unsupported_note: ClassVar[str] = ""  # appended when a model kind is not supported
    # What the maps claim to sum to (the ``completeness_gap`` metric checks it): "logit" = the
    # explained logit minus the model's constant logit bias; "" = no completeness claim.
    completeness: ClassVar[str] = ""
    completeness_inputs: ClassVar[int] = 1  # model inputs per sample of completeness_target (IG: x and its baseline)
    # Model inputs per explained input in one model call (DeepLift runs inputs and baselines together).
    inputs_per_call: ClassVar[int] = 1
    # Parameters that only batch the method's work (its maps do not depend on them, tested): left out of the resume
    # key, and recorded in each row (``params.cost_params``) so that ``compare`` reports them as cost, not protocol.
    cost_params: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            valid = ", ".join(sorted(self.defaults)) or "(none)"
            raise ParameterError(f"method {self.name!r} has no parameter(s) {', '.join(unknown)}; valid: {valid}")
        for key, value in params.items():
            where = f"method {self.name!r} parameter {key}"
            default, number = self.defaults[key], isinstance(value, int) and not isinstance(value, bool)
            if default == AUTO and key not in self.choices and not (number or value == AUTO):  # auto or a number
                raise ParameterError(f"{where} must be {AUTO!r} or an integer >= 1, got {value!r}")
            params[key] = check_type(value, 1 if default == AUTO and number else default, where)
            if key in self.choices and params[key] not in self.choices[key]:
                raise ParameterError(f"{where} must be one of {', '.join(map(repr, self.choices[key]))}, got {value!r}")
            if isinstance(params[key], int) and not isinstance(params[key], bool) and params[key] < (key != "seed"):
                raise ParameterError(f"{where} must be >= {int(key != 'seed')}, got {value!r}")
        self.params = {**self.defaults, **params}

    @property
    def protocol_params(self) -> dict[str, Any]:
        """The parameters a map depends on: :attr:`params` without :attr:`cost_params`."""
        return {k: v for k, v in self.params.items() if k not in self.cost_params}

    @property
    def max_batch(self) -> int:
        """At most this many inputs per model call: the bound of the :meth:`attribute` call under way (a context
        variable, so the method object is never changed by a call and may serve several threads)."""
        return _MAX_BATCH.get()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"

    def check(self, model: ModelAdapter) -> None:
        """Raise :class:`UnsupportedMethodError` if this method cannot explain ``model``."""
        caps = self.capabilities
        if model.modality == "text":
            if not caps.text:
                self._unsupported(model, f"it does not support text models{self.unsupported_note}")
        elif (model.is_vit and not caps.vit) or (not model.is_vit and not caps.cnn):
            kind = "ViT" if model.is_vit else "CNN"
            self._unsupported(model, f"it does not support {kind}s{self.unsupported_note}")
        if caps.needs_layer and not model.conv_layer:
            self._unsupported(model, "it needs a convolutional layer and the model declares none (conv_layer)")
        if caps.needs_native and not model.has_native_explanation:
            self._unsupported(model, f"it needs a B-cos, B-cosified or ALOE model; this one is {model.family}")
        self._check(model)

    def _check(self, model: ModelAdapter) -> None:
        """Method-specific support checks (override)."""

    def _unsupported(self, model: ModelAdapter, why: str) -> None:
        raise UnsupportedMethodError(f"method {self.name!r} cannot explain model {model.name!r}: {why}")

    def attribute(
        self, model: ModelAdapter, inputs: Tensor, targets: Tensor, *, max_batch: int = DEFAULT_MAX_BATCH
    ) -> Tensor:
        """Channel-summed maps (B, H, W) (text: (B, T)), one per (input, target), on the inputs' device.

        The model never sees more than ``max_batch`` inputs in one call: the batch is explained in
        chunks, and methods that evaluate many inputs per explained input (IntegratedGradients'
        steps, LIME's and Shapley sampling's perturbations) split their evaluations to fit.
        """
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < self.inputs_per_call:
            raise ValueError(
                f"max_batch must be an integer >= {self.inputs_per_call} for method {self.name!r} "
                f"(model inputs per explained input in one call), got {max_batch!r}"
            )
        self.check(model)
        if inputs.dim() != (3 if model.modality == "text" else 4):
            expected = "(B, D, T) embeddings" if model.modality == "text" else "(B, C, H, W) model inputs"
            raise ValueError(f"inputs must be {expected}, got shape {tuple(inputs.shape)}")
        if targets.shape != (inputs.shape[0],):
            raise ValueError(f"targets must have shape ({inputs.shape[0]},), got {tuple(targets.shape)}")
        targets = targets.to(device=inputs.device, dtype=torch.long)
        bad = (targets < 0) | (targets >= model.num_classes)
        if bool(bad.any()):
            raise ValueError(
                f"targets must be class indices in 0..{model.num_classes - 1} of model {model.name!r}; got "
                f"{targets[bad][:8].tolist()} at batch positions {bad.nonzero().flatten()[:8].tolist()}"
            )
        token = _MAX_BATCH.set(max_batch)  # this call's bound, read by the methods as self.max_batch
        try:
            return self._attribute_chunks(model, inputs, targets, max_batch)
        finally:
            _MAX_BATCH.reset(token)

    def _attribute_chunks(self, model: ModelAdapter, inputs: Tensor, targets: Tensor, max_batch: int) -> Tensor:
        """The maps in chunks of ``max_batch // inputs_per_call`` inputs (:func:`faithbench.calls.in_chunks`: smaller
        after an out-of-memory error, kept for this model, method and input shape)."""
        share, first = self.shares_forward(model), max(1, max_batch // self.inputs_per_call)

        def chunk(start: int, stop: int) -> Tensor:
            x, t = inputs[start:stop].detach(), targets[start:stop]
            rows = current_size() or first  # stepped down after running out of memory: the method's passes follow
            token = _MAX_BATCH.set(max_batch if rows >= first else rows * self.inputs_per_call)
            try:
                return chunk_maps(x, t)
            finally:
                _MAX_BATCH.reset(token)

        def chunk_maps(x: Tensor, t: Tensor) -> Tensor:
            if share and has_repeats(x):  # GridPG: one grid, one target per cell
                distinct, inverse, occurrence = occurrences(x)
                maps = self._attribute_shared(model, x[distinct], inverse, occurrence, t)
            else:
                maps = self._attribute(model, x, t)
            maps = (channel_sum(maps) if maps.dim() == inputs.dim() else maps).detach()
            self._check_maps(model, x, t, maps)
            return maps

        key = (model.name, self.name, tuple(inputs.shape[1:]), "with gradients")
        out = in_chunks(chunk, inputs.shape[0], first, key=key)
        return torch.cat(out).to(inputs.dtype) if out else inputs.new_zeros((0, *inputs.shape[2:]))

    def _check_maps(self, model: ModelAdapter, x: Tensor, t: Tensor, maps: Tensor) -> None:
        """A map per input of its size, finite; non-finite maps of non-finite logits blame the model, not the method."""
        if maps.shape != (x.shape[0], *x.shape[2:]):
            raise ValueError(
                f"method {self.name!r} returned maps of shape {tuple(maps.shape)} for inputs {tuple(x.shape)} of model "
                f"{model.name!r}; expected {(x.shape[0], *x.shape[2:])} or the inputs' shape"
            )
        bad = ~torch.isfinite(maps.reshape(maps.shape[0], -1)).all(dim=1)
        if bool(bad.any()):
            with torch.no_grad():
                logits_ok = bool(torch.isfinite(model.module(x[bad])).all())
            culprit = f"method {self.name!r} returned" if logits_ok else f"model {model.name!r} has non-finite logits:"
            raise ValueError(
                f"{culprit} NaN/inf maps for {int(bad.sum())} of {len(bad)} inputs of model {model.name!r} (batch "
                f"positions {bad.nonzero().flatten()[:8].tolist()})"
            )

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        raise NotImplementedError

    def shares_forward(self, model: ModelAdapter) -> bool:
        """Whether equal inputs explained for different targets share one forward pass on ``model``
        (:meth:`_attribute_shared`; :mod:`faithbench.attributions.shared_forward`)."""
        return False

    def _attribute_shared(
        self, model: ModelAdapter, distinct: Tensor, inverse: Tensor, occurrence: Tensor, targets: Tensor
    ) -> Tensor:
        """The maps (B, ...) of rows ``distinct[inverse]`` for ``targets``, one forward pass of ``distinct``."""
        raise NotImplementedError

    # The cost estimate of a run (``bench run --dry-run``: :mod:`faithbench.bench.estimate.counts`), declared per
    # method.
    def model_inputs_per_explanation(self, model: ModelAdapter) -> int | None:
        """Model inputs (images through the model; a backward pass counts with its forward) that one explained
        (input, target) costs on ``model``, which may be a stand-in described by the model registry (no weights).
        None: undeclared (the estimate then counts ``inputs_per_call`` and says so)."""
        return None

    def shares_equal_inputs(self, model: ModelAdapter) -> bool:
        """Whether equal inputs explained for different targets in one call cost one explanation (GridPG's cells)."""
        return self.shares_forward(model)

    def model_calls(self, inputs: int, per_input: int, max_batch: int) -> int:
        """Model calls that explaining ``inputs`` (at most ``max_batch``) distinct inputs in one call takes, each
        costing ``per_input`` model inputs (:meth:`model_inputs_per_explanation`): calls of at most ``max_batch``."""
        return -(-inputs * per_input // max_batch)

    def cost_note(self, model: ModelAdapter) -> str:
        """Why :meth:`model_inputs_per_explanation` is an estimate on ``model`` ("" where it is exact)."""
        return ""

    def completeness_target(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        """(B,) what this method's maps of (inputs, targets) claim to sum to (see ``completeness``)."""
        if not self.completeness:
            raise TypeError(f"method {self.name!r} makes no completeness claim")
        with torch.no_grad():
            logits = model.module(inputs).gather(1, targets.long().view(-1, 1)).squeeze(1)
        return logits - model.logit_bias

    def has_positional_term(self, model: ModelAdapter) -> bool:
        """Whether part of this method's claimed total on ``model`` belongs to positional embeddings rather than
        to any input feature (see :meth:`positional_term`)."""
        return False

    def positional_term(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor | None:
        """(B,) that part (reported on its own by the ``positional_share`` metric), or None where
        :meth:`has_positional_term` is False."""
        return None


def one_pass(self: AttributionMethod, model: ModelAdapter) -> int:
    """``model_inputs_per_explanation`` of a method that passes its input through the model once, forward and backward:
    ``inputs_per_call`` model inputs (DeepLift's baseline runs beside its input)."""
    return self.inputs_per_call


def no_model_input(self: AttributionMethod, model: ModelAdapter) -> int:
    """``model_inputs_per_explanation`` of a method that never asks the model (the controls)."""
    return 0


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG for a sampling method without disturbing the caller's RNG state."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def module_by_name(model: nn.Module, name: str) -> nn.Module:
    modules = dict(model.named_modules())
    if name not in modules:
        raise UnsupportedMethodError(f"layer {name!r} is not a module of the model")
    return modules[name]
