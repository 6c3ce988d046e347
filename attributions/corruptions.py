"""Corruption controls: a real method's map made unfaithful on purpose, for trained models.

The ground-truth tier plants corruptions of an exact attribution (:mod:`.truth_controls`); on a trained model the
truth is unknown, but a method's map can still be corrupted in ways that must cost it its faithfulness. Each control
explains with the method named by its parameter ``of`` (default ``input_x_gradient``: one pass, every model kind)
at the parameters ``of_params`` (default: its own defaults; a suite passes its ``[method_params.<of>]``, so that the
corruption corrupts the run's own maps) and corrupts the result:

- ``shuffled``: the map's values permuted over the features (one seeded permutation of the H x W pixels shared by
  every sample; text: of each sentence's tokens, padding kept): the same values, no longer where the model looked;
- ``other_class``: the map of the next class, ``(target + 1) mod K``: faithful to the model, but to the wrong logit;
- ``randomised_model``: the map of the same input and target on a copy of the model with every parameterised layer
  re-drawn (Adebayo et al. 2018's cascade run to the end: ``gaussian-matched`` re-initialisation, seeded; see
  :mod:`faithbench.metrics.randomisation`): a map of another function.

The report card (:mod:`faithbench.bench.report.card`) asks every metric how often it scores the ``of`` method's map
better than each corruption of it on the same sample (its ``AUROC corruptions``).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, ClassVar

import torch
from torch import Tensor

from faithbench.attributions.base import AttributionMethod, Capabilities
from faithbench.attributions.controls import text_positions
from faithbench.models.adapter import ModelAdapter
from faithbench.models.randomise import parameter_layers, randomise_layer
from faithbench.registry import Registry

CORRUPTION_CONTROLS = ("shuffled", "other_class", "randomised_model")
DEFAULT_BASE = "input_x_gradient"


class Corruption(AttributionMethod):
    """A corruption of the maps of the method ``of`` (built from ``methods``, the method registry)."""

    capabilities: ClassVar[Capabilities] = Capabilities(text=True)
    defaults: ClassVar[dict] = {"of": DEFAULT_BASE, "of_params": {}}
    methods: ClassVar[Registry]  # bound by faithbench.attributions, whose registry imports this module

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        of, of_params = self.params["of"], self.params["of_params"]
        if of in CORRUPTION_CONTROLS:
            raise ValueError(f"method {self.name!r} cannot corrupt another corruption ({of!r})")
        if not isinstance(of_params, dict):
            raise ValueError(f"method {self.name!r} parameter of_params must be a table of {of!r}'s parameters")
        self.base: AttributionMethod = self.methods.get(of)(**of_params)
        caps = self.base.capabilities
        self.capabilities = dataclasses.replace(
            caps,
            seeded=type(self).capabilities.seeded,
            class_specific=True,
            model_free=False,
            ground_truth=False,
            coarse=caps.coarse and not isinstance(self, Shuffled),  # a shuffled map is per pixel (GridPG smooths it)
        )
        self.inputs_per_call = self.base.inputs_per_call  # the same chunks as the method it wraps

    def _check(self, model: ModelAdapter) -> None:
        self.base.check(model)

    def _base_maps(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return self.base.attribute(model, inputs, targets, max_batch=self.max_batch)

    def model_inputs_per_explanation(self, model: ModelAdapter) -> int | None:
        return self.base.model_inputs_per_explanation(model)

    def shares_equal_inputs(self, model: ModelAdapter) -> bool:
        return self.base.shares_equal_inputs(model)

    def model_calls(self, inputs: int, per_input: int, max_batch: int) -> int:
        return self.base.model_calls(inputs, per_input, max_batch)

    def cost_note(self, model: ModelAdapter) -> str:
        return self.base.cost_note(model)


class Shuffled(Corruption):
    name = "shuffled"
    description = "control: a method's map (of, default input_x_gradient) with its values permuted over the features"
    capabilities = Capabilities(text=True, seeded=True)
    defaults: ClassVar[dict] = {"of": DEFAULT_BASE, "of_params": {}, "seed": 0}

    def _keys(self, n: int, device: torch.device) -> Tensor:
        gen = torch.Generator().manual_seed(self.params["seed"])
        return torch.rand(n, generator=gen, dtype=torch.float64).to(device)

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        maps = self._base_maps(model, inputs, targets)
        flat = maps.reshape(len(maps), -1)
        keys = self._keys(flat.shape[1], maps.device).expand(len(flat), -1)
        if model.modality != "text":
            return flat.gather(1, keys.argsort(dim=1)).reshape(maps.shape)
        _, present = text_positions(inputs)
        inf = torch.tensor(torch.inf, dtype=torch.float64, device=maps.device)
        index = torch.arange(flat.shape[1], device=maps.device, dtype=torch.float64).expand_as(keys)
        by_key = torch.where(present, keys, inf).argsort(dim=1, stable=True)  # tokens first, in the permuted order
        by_position = torch.where(present, index, inf).argsort(dim=1, stable=True)  # tokens first, in order
        first = torch.arange(flat.shape[1], device=maps.device) < present.sum(dim=1, keepdim=True)
        moved = torch.where(first, flat.gather(1, by_key), flat.gather(1, by_position))  # padding onto itself
        return flat.clone().scatter_(1, by_position, moved).reshape(maps.shape)


class OtherClass(Corruption):
    name = "other_class"
    description = "control: a method's map (of, default input_x_gradient) of the next class, (target + 1) mod K"

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return self._base_maps(model, inputs, (targets + 1) % model.num_classes)


class RandomisedModel(Corruption):
    name = "randomised_model"
    description = (
        "control: a method's map (of, default input_x_gradient) on a copy of the model with every layer re-drawn"
    )
    capabilities = Capabilities(text=True, seeded=True)
    defaults: ClassVar[dict] = {"of": DEFAULT_BASE, "of_params": {}, "seed": 0}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self._copy: tuple[object, tuple[int, ...], ModelAdapter] | None = None  # (module, its versions, randomised)

    def _check(self, model: ModelAdapter) -> None:
        super()._check(model)
        if model.native_explainer is not None and self.base.capabilities.needs_native:
            self._unsupported(model, "the model's own explainer is bound to its original weights")

    def randomised(self, model: ModelAdapter) -> ModelAdapter:
        """``model`` with every parameterised layer re-initialised (gaussian-matched, seeded), built once."""
        # keyed by the module and its parameters' versions: the randomisation metric re-draws a copy's layers in place
        versions = tuple(p._version for p in model.module.parameters())
        if self._copy is None or self._copy[0] is not model.module or self._copy[1] != versions:
            module = copy.deepcopy(model.module)
            gen = torch.Generator().manual_seed(self.params["seed"])
            for _, layer in parameter_layers(module):
                randomise_layer(layer, "gaussian-matched", gen)
            randomised = dataclasses.replace(model, module=module, name=f"{model.name} (randomised)")
            self._copy = (model.module, versions, randomised)
        return self._copy[2]

    def _attribute(self, model: ModelAdapter, inputs: Tensor, targets: Tensor) -> Tensor:
        return self._base_maps(self.randomised(model), inputs, targets)


CORRUPTION_METHODS: tuple[type[AttributionMethod], ...] = (Shuffled, OtherClass, RandomisedModel)
