"""A run's cost before it runs (``bench run --dry-run``): the model inputs and model calls of every (model, method)
unit, added up from what the methods and metrics declare; no model loads and nothing is computed.

A method declares what one explained (input, target) costs
(:meth:`~faithbench.attributions.base.AttributionMethod.model_inputs_per_explanation`) and whether equal inputs
explained for different targets share it (the cells of one grid image); a metric declares what it asks of one piece
of a unit (``MetricSpec.cost``: :class:`~faithbench.metrics.spec.MetricCost` items of explanations and of model inputs
of its own). Items with equal keys are one computation: once per unit and piece (the per-sample maps that every map
metric reads), or once per model and piece (a grid selection, the predicted classes: the runner charges them to
the first unit of the model that asks). A selection shared across models (a metric's ``pairing``) costs each
deciding model what its own selection would, once, before any unit, and appears in no result row.

Model inputs count images through the model, a backward pass with its forward, as the result rows' ``model_inputs``
do; the calls follow from the suite's batch sizes (on a GPU, from the top of the ladder its calls step down from:
the fewest they can be). A model that is not loaded is a stand-in that carries what the
model registry says of it (family, modality, ViT or not, input size, a positional embedding); whether a method's
rules cover a model's layers is known only when it loads, so such units are counted (``known`` False).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor, nn

from faithbench.attributions import AttributionMethod, UnsupportedMethodError
from faithbench.bench.run.evaluate import suite_unit
from faithbench.bench.run.plan import Plan
from faithbench.calls import call_rows
from faithbench.metrics.spec import MetricCost, Unit
from faithbench.models import zoo
from faithbench.models.adapter import POSITIONAL_EMBEDDING, ModelAdapter, ModelFacts
from faithbench.models.data.datasets import EvalData
from faithbench.models.registry import MODELS
from faithbench.models.truth.image_exact import IDENTITY

UNDECLARED = "the method declares no cost: counted as one forward and backward pass per explanation"
ASSUMED_FREE_GIB = 80.0  # a GPU plan's free memory where this machine has no GPU: an H100's


@dataclass(frozen=True)
class Estimate:
    """``units``: per (model, method) unit its ``model inputs`` and ``model calls`` over its pieces (``known``: whether
    the model accepts the method is known now; ``notes``: why a count is an estimate, empty where it is exact);
    ``models``: per model the work its units share (``shared inputs`` / ``calls``, once per piece) and the
    selection it decides for every model before any unit (``before inputs`` / ``calls``); ``skipped``: units the
    model refuses, with the reason; ``notes``: what the estimate leaves out."""

    units: pd.DataFrame
    models: pd.DataFrame
    skipped: dict[tuple[str, str], str]
    notes: tuple[str, ...]

    def total(self) -> tuple[int, int]:
        """(model inputs, model calls) of the whole run."""
        cols = (("model inputs", "shared inputs", "before inputs"), ("model calls", "shared calls", "before calls"))
        return tuple(int(self.units[u].sum() + self.models[s].sum() + self.models[b].sum()) for u, s, b in cols)


class _StandIn(nn.Module):
    """A stand-in model's module: no weights, only the submodules the methods' cost hooks look for."""

    def __init__(self, positional: bool) -> None:
        super().__init__()
        if positional:
            self.add_module(POSITIONAL_EMBEDDING, nn.Identity())


GUESSED = "{name}: its registry entry states no facts (ModelSpec.facts): counted as a 224 px CNN of 1,000 classes"
_GUESS = ModelFacts(input_size=(224, 224), num_classes=1000, conv_layer="unknown")


def stand_in(name: str) -> ModelAdapter:
    """The adapter of model ``name`` as its registry entry states it (``ModelSpec.facts``: input size, ViT or CNN,
    a convolutional layer, a positional embedding, its own explainer), without its weights; an entry that states
    none is a 224 px CNN (:data:`GUESSED` says so)."""
    spec = MODELS.get(name)
    facts = spec.facts or _GUESS
    return ModelAdapter(
        name=name,
        family=spec.family,
        module=_StandIn(facts.positional_embedding),
        encoding=spec.encoding or IDENTITY,
        num_classes=facts.num_classes,
        input_size=facts.input_size,
        is_vit=facts.is_vit,
        conv_layer=facts.conv_layer,
        native_explainer=(lambda x, t: x) if facts.native_explainer else None,
        modality=spec.modality,
        truth=(lambda x, t: x) if facts.truth else None,
    )


def refusal(method: AttributionMethod, model: ModelAdapter, loaded: bool) -> str | None:
    """Why ``model`` refuses ``method`` (None: it accepts it, or, for a stand-in, its capabilities fit)."""
    caps = method.capabilities
    if loaded:
        try:
            method.check(model)
        except UnsupportedMethodError as exc:
            return str(exc)
        return None
    kind = "text model" if model.modality == "text" else "ViT" if model.is_vit else "CNN"
    if not {"text model": caps.text, "ViT": caps.vit, "CNN": caps.cnn}[kind]:
        return f"method {method.name!r} does not support {kind}s"
    if caps.needs_layer and not model.conv_layer:
        return f"method {method.name!r} needs a convolutional layer"
    if caps.needs_native and not model.has_native_explanation:
        return f"method {method.name!r} needs a B-cos, B-cosified or ALOE model"
    return None


def _count(item: MetricCost, unit: Unit, per: int, share: bool) -> tuple[int, int]:
    """(model inputs, model calls) of one item on one piece: its explanations in chunks of ``explain_batch`` rows
    (``per`` inputs per distinct input), its own inputs in runs of ``eval_batch``."""
    inputs, calls = item.inputs, len(item.requests(unit.eval_batch))
    rows, b, r = item.explanations // item.passes, unit.explain_batch, item.repeats
    for start in range(0, rows, b):
        end = min(start + b, rows)
        n = (end - 1) // r - start // r + 1 if share else end - start
        calls += item.passes * unit.method.model_calls(n, per, unit.max_batch)
        inputs += item.passes * n * per
    return inputs, calls


def _unit(
    plan: Plan, model: ModelAdapter, method: AttributionMethod, n_images: int, piece: int, shared: dict, rows: int
) -> Unit:
    """The unit the run builds (:func:`~faithbench.bench.run.evaluate.suite_unit`) on an evaluation set of
    ``n_images`` images that is not read (an empty (N, 0) tensor)."""
    suite = plan.suite
    samples = min(suite.n_samples, n_images) if n_images else suite.n_samples
    data = EvalData(suite.dataset, torch.empty(n_images, 0), torch.zeros(n_images).long())
    return suite_unit(suite, model, method, data, torch.arange(samples), torch.device("cpu"), rows, rank=piece,
                      world=suite.pieces, shared=shared)  # fmt: skip


def input_bytes(module: nn.Module, model: ModelAdapter, image: Tensor) -> int:
    """The bytes one input of ``model`` (``image``, one in [0, 1], encoded) adds to a forward and backward of
    ``module`` (its network or an architecture of it): what autograd keeps for the backward pass, each storage once
    (1 row from 3; the weights, kept in both, cancel). A call without gradients keeps less."""
    weight = next(module.parameters(), None)
    one = model.encode(image[:1].to(weight.device if weight is not None else "cpu"))

    def saved(n: int) -> int:
        storages: dict[tuple[int, str], int] = {}

        def pack(t: Tensor) -> Tensor:
            storages[(t.untyped_storage().data_ptr(), str(t.device))] = t.untyped_storage().nbytes()
            return t

        rows = one.expand(n, *one.shape[1:]).contiguous().requires_grad_(True)
        with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(rows)
        return sum(storages.values())

    return max(1, (saved(3) - saved(1)) // 2)


def architecture(name: str) -> nn.Module | None:
    """Image model ``name``'s architecture, untrained (the shapes its memory follows): a zoo recipe's, a registry
    model's (``ModelSpec.architecture``); None for others (ALOE's lives with its weights on the Hub)."""
    spec = MODELS.get(name)
    recipe = zoo.RECIPES.get(name) if spec.source == "zoo" else None
    if recipe is not None:
        return recipe.architecture().eval() if recipe.modality == "image" else None
    return spec.architecture().eval() if spec.architecture is not None and spec.encoding is not None else None


def _items(plan: Plan, unit: Unit) -> list[tuple[str, MetricCost | None]]:
    """(metric, item) of every metric the unit evaluates (``MetricSpec.evaluates``; None: the metric declares no
    cost)."""
    out: list[tuple[str, MetricCost | None]] = []
    for metric in plan.metrics:
        spec = metric.spec
        if spec.evaluates(unit):
            out += [(metric.name, i) for i in spec.cost(unit, metric.config)] if spec.cost else [(metric.name, None)]
    return out


def estimate(
    plan: Plan,
    models: Mapping[str, ModelAdapter] | None = None,
    n_images: int | None = None,
    *,
    device: torch.device | str = "cpu",
    image: Tensor | None = None,
) -> Estimate:
    """The cost of running ``plan`` (the models in ``models`` as they are, the others as :func:`stand_in` describes
    them) on an evaluation set of ``n_images`` images (None: not read; work per image is then not counted), on
    ``device``: calls of the suite's ``max_batch`` there (:func:`faithbench.calls.call_rows`; a GPU's are the fewest
    its calls can be: it finds smaller sizes by trying). On a GPU each image model's memory per input with gradients
    is measured on its architecture with ``image`` (one evaluation image: :func:`input_bytes`; ``input bytes``, None
    where it is not measured)."""
    suite, models = plan.suite, dict(models or {})
    deciding = {x.name: x.deciders for x in plan.metrics}
    shared = {name: None for name, who in deciding.items() if who}
    notes = [] if n_images else ["the data set was not read: the work per evaluation image (selections) is left out"]
    rows, gpu = call_rows(suite.max_batch, device), torch.device(device).type == "cuda"
    units, per_model, skipped = [], [], {}
    for name in suite.models:
        model = models.get(name) or stand_in(name)
        if name not in models and MODELS.get(name).facts is None:
            notes.append(GUESSED.format(name=name))
        module = model.module if name in models else architecture(name) if gpu else None
        measured = gpu and module is not None and image is not None and model.modality == "image"
        model_work: dict[tuple[int, Hashable], tuple[int, int]] = {}  # (piece, key): once per model and piece
        for job in plan.jobs:
            method = job.build()
            why = refusal(method, model, name in models)
            if why:
                skipped[(name, job.name)] = why
                continue
            inputs, calls, found, missing = _unit_cost(plan, model, method, n_images or 0, shared, model_work, rows)
            notes += [f"metric {metric} declares no cost: not counted" for metric in sorted(missing)]
            known = name in models or type(method)._check is AttributionMethod._check
            units.append({"model": name, "method": job.name, "model inputs": inputs, "model calls": calls,
                          "known": known, "notes": tuple(sorted(found))})  # fmt: skip
        before = _before(plan, model, deciding, n_images or 0, rows)
        per_model.append({"model": name, "shared inputs": sum(i for i, _ in model_work.values()),
                          "shared calls": sum(c for _, c in model_work.values()),
                          "before inputs": before[0], "before calls": before[1],
                          "input bytes": input_bytes(module, model, image) if measured else None})  # fmt: skip
    frame = pd.DataFrame(units, columns=["model", "method", "model inputs", "model calls", "known", "notes"])
    return Estimate(frame, pd.DataFrame(per_model), skipped, tuple(dict.fromkeys(notes)))


def device_free(device: torch.device) -> int | None:
    """The free memory of a plan's GPU: its own where this machine has it, else ``ASSUMED_FREE_GIB``; None on the
    CPU."""
    if device.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return int(ASSUMED_FREE_GIB * 2**30)
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def _unit_cost(
    plan: Plan,
    model: ModelAdapter,
    method: AttributionMethod,
    n_images: int,
    shared: dict,
    model_work: dict,
    rows: int,
) -> tuple[int, int, set[str], set[str]]:
    """(model inputs, model calls, notes, the metrics that declare no cost) of one unit over its pieces; the work its
    model's units share goes into ``model_work`` (each key once per piece, whichever unit asks first)."""
    declared = method.model_inputs_per_explanation(model)
    per = method.inputs_per_call if declared is None else declared
    share = method.shares_equal_inputs(model)
    note, inputs, calls = method.cost_note(model), 0, 0
    found: set[str] = {UNDECLARED} if declared is None else set()
    missing: set[str] = set()
    for piece in range(plan.suite.pieces):
        unit, seen = _unit(plan, model, method, n_images, piece, shared, rows), set()
        for metric, item in _items(plan, unit):
            if item is None:
                missing.add(metric)
                continue
            counted = _count(item, unit, per, share)
            found |= {item.note} if item.note and (item.inputs or per) else set()  # a control explains for free
            found |= {note} if item.explanations and per and note else set()
            if item.scope == "model":
                model_work[(piece, item.key)] = counted
            elif item.key not in seen:
                seen.add(item.key)
                inputs, calls = inputs + counted[0], calls + counted[1]
    return inputs, calls, found, missing


def _before(
    plan: Plan, model: ModelAdapter, deciding: dict[str, tuple[str, ...]], n_images: int, rows: int
) -> tuple[int, int]:
    """What ``model`` computes before any unit: for each metric whose items it decides for every model, the work of
    choosing its own (the metric's per-model work, asked as if nothing were shared)."""
    inputs = calls = 0
    method = plan.jobs[0].build() if plan.jobs else None
    for metric in plan.metrics:
        if method is None or model.name not in deciding.get(metric.name, ()) or metric.spec.cost is None:
            continue
        unit = _unit(plan, model, method, n_images, 0, {}, rows)
        for item in metric.spec.cost(unit, metric.config):
            if item.scope == "model":
                i, c = _count(item, unit, 0, False)
                inputs, calls = inputs + i, calls + c
    return inputs, calls
