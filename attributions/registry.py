"""The method registry: every attribution method a suite can name, and the control sets a run adds.

Adding a method: a module with its :class:`~faithbench.attributions.base.AttributionMethod` subclass and one line in
the tuple below (or :func:`register_method` from outside the package, e.g. in a suite's ``plugins`` module), as the
metrics (:mod:`faithbench.metrics.registry`) and models (:mod:`faithbench.models.registry`) do.
"""

from __future__ import annotations

from faithbench.attributions.attnlrp import AttnLrp
from faithbench.attributions.base import AttributionMethod
from faithbench.attributions.chefer import CheferCam
from faithbench.attributions.controls import CONTROL_METHODS, CONTROLS
from faithbench.attributions.corruptions import CORRUPTION_CONTROLS, CORRUPTION_METHODS, Corruption
from faithbench.attributions.gradients import (
    DeepLift,
    GradCam,
    Gradient,
    GuidedBackprop,
    InputXGradient,
    IntegratedGradients,
)
from faithbench.attributions.lrp import LRP
from faithbench.attributions.native import NativeExplanation, NativeNormalisedInput
from faithbench.attributions.perturbation import Lime, ShapleySampling
from faithbench.attributions.rollout import AttentionRollout, LastLayerAttention
from faithbench.attributions.truth_controls import TRUTH_CONTROLS, TRUTH_METHODS
from faithbench.registry import Registry

METHODS: Registry[type[AttributionMethod]] = Registry("method")
RUN_CONTROLS = CONTROLS + CORRUPTION_CONTROLS  # what a suite's ``controls = true`` runs beside its methods
ALL_CONTROLS = RUN_CONTROLS + TRUTH_CONTROLS  # every map that is a yardstick, not a contestant


def register_method(cls: type[AttributionMethod]) -> type[AttributionMethod]:
    """Register a method class under its ``name`` (usable as a class decorator, e.g. in a suite's plugin)."""
    METHODS.register(cls.name, cls)
    return cls


for _cls in (
    NativeExplanation,
    NativeNormalisedInput,
    Gradient,
    InputXGradient,
    IntegratedGradients,
    GuidedBackprop,
    DeepLift,
    GradCam,
    LRP,
    Lime,
    ShapleySampling,
    AttentionRollout,
    LastLayerAttention,
    CheferCam,
    AttnLrp,
    *CONTROL_METHODS,
    *CORRUPTION_METHODS,
    *TRUTH_METHODS,
):
    register_method(_cls)


Corruption.methods = METHODS  # the corruption controls build the method they corrupt


def get_method(name: str, **params: object) -> AttributionMethod:
    """Build the method registered as ``name`` (unknown names and parameters list the valid ones)."""
    return METHODS.get(name)(**params)
