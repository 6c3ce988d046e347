"""The contract between the metrics and the runner: one :class:`MetricSpec` per metric.

A metric module defines its pure function(s), a typed config (a frozen dataclass: its parameters
and their defaults, once) and an evaluation hook ``evaluate(unit, config) -> MetricResult``. The
runner calls that hook, with the same signature, for every metric of a suite; it knows no metric
by name. A :class:`Unit` is what one (model, method) pair offers the hooks: the model, the
attribution method, the evaluation images, this process's shard, and memo caches so that metrics
sharing work (explanations of the same samples, one comp/suff computation for two metrics, a
model's GridPG grids for all its methods) compute it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.metrics.types import Example, MetricResult  # the hooks' results, imported by name from here too

if TYPE_CHECKING:  # type hints only: the metrics layer does not import the adapters at run time
    from faithbench.attributions.base import AttributionMethod
    from faithbench.metrics.mapstore import MapStore
    from faithbench.models.adapter import ModelAdapter
    from faithbench.registry import Registry


@dataclass(frozen=True)
class NoConfig:
    """Config of a metric without parameters."""


def sample_maps_cost(unit: Unit, target: str = "label") -> tuple[MetricCost, ...]:
    """What :meth:`Unit.sample_maps` costs a piece, shared by the metrics that read the maps: its samples explained for
    their labels; for the ``predicted`` classes also the model's predictions (shared by its units) and the samples
    it misclassifies explained again (counted as none: how many is known once the model has run)."""
    n = len(unit.take(len(unit.sample_ids)))
    maps = MetricCost(("samples", "label"), explanations=n)
    if target == "label":
        return (maps,)
    note = "misclassified samples explained again for their prediction: not counted"
    again = MetricCost(("samples", target), note=note)
    return maps, MetricCost(("predicted",), inputs=n, scope="model"), again


@dataclass(frozen=True)
class MetricCost:
    """One computation a metric asks of one piece of a unit, for the run's cost estimate (``bench run --dry-run``,
    :mod:`faithbench.bench.estimate.counts`): ``explanations`` (input, target) pairs of the unit's method and ``inputs``
    model inputs of the metric's own (perturbed images, predictions), each in ``passes`` equal runs (a run's
    explanations ``explain_batch``, its inputs ``eval_batch`` per call); ``repeats`` consecutive pairs share one input
    (GridPG's cells on their grid: methods that share equal inputs explain it once). Equal ``key``s are one
    computation, counted once per ``scope``: ``unit`` (per unit and piece) or ``model`` (shared by a model's units:
    once per model and piece). ``note``: why the count is an estimate ("" where it is exact)."""

    key: Hashable
    explanations: int = 0
    inputs: int = 0
    repeats: int = 1
    passes: int = 1
    scope: str = "unit"
    note: str = ""

    def requests(self, eval_batch: int) -> list[int]:
        """The sizes of the model calls its own inputs make on their own, in order."""
        runs = (-(-self.inputs // self.passes),) * self.passes if self.inputs else ()
        return [min(eval_batch, r - s) for r in runs for s in range(0, r, eval_batch)]


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    """How to configure, compute, read and report one metric.

    Attributes:
        table: the suite's TOML table that holds ``config`` (metrics may share one: deletion and
            insertion share ``[deletion]``); ``None`` for metrics without parameters.
        config: the typed config class; ``NoConfig`` for none.
        evaluate: the hook ``evaluate(unit, config) -> MetricResult``; ``None`` while no suite of the
            metric's modality exists (``unavailable`` says why).
        modalities: ``image`` and / or ``text`` (default: image only).
        unit: the reported unit ("%", "AUC", "nats"; default none).
        scale: multiplies raw scores for reporting (100 where the papers report percent; default 1).
        conventions: the metric's named protocol conventions (presets), listed by ``bench list``.
        plot: ``bar`` (per-sample scores by method and model) or ``curve`` (mean curve per method).
        curve_label: x-axis label of the curve plot; ``curve_value_label``: its y-axis label.
        example: hook ``example(unit, config) -> Example`` for the report's panel.
        applies: hook ``applies(unit) -> reason | None``: why the metric does not apply to a
            unit's method (no row is written for that unit), or None when it does.
        ground_truth: the metric knows where the explained evidence is (a grid cell, a segment), so it
            can score the ``oracle`` control (its hook asks ``method.from_truth``); other metrics skip it.
        pairing: hook ``pairing(config, suite_models) -> model names`` that decide the metric's items for every
            model of the suite (empty: each model chooses its own); ``suite_models`` maps the suite's models, in
            order, to their families, and the hook raises :class:`faithbench.errors.UserError` for a suite it
            cannot pair; ``eligibility(model, images, labels,
            config, device, batch) -> (eligible (M,) bool, score (M,))`` is one model's part of that choice.
            The runner combines them (:mod:`faithbench.bench.run.pairing`) into :attr:`Unit.shared`.
        cost: hook ``cost(unit, config) -> tuple[MetricCost, ...]``: what the metric asks of one piece of a unit (the
            unit's model may be a stand-in that the model registry describes, its images an empty (N, 0) tensor).
        given_maps: it reads only its samples' maps (:meth:`Unit.sample_maps`): ``faithbench.score`` can score others'.
        refuses: hook ``refuses(config) -> reason | None``: a config the metric cannot run with (insertion under a
            deletion-only baseline), refused when a suite is planned, before any model loads, and by ``score``.
        float_floor: in the reported unit, the change of a mean that float rounding alone makes (the same code and
            weights on another CPU type or device); ``compare`` allows at least this much. 0: none is known.
    """

    name: str
    description: str
    higher_is_better: bool
    modalities: tuple[str, ...] = ("image",)
    scale: float = 1
    unit: str = ""
    evaluate: Callable[[Unit, Any], MetricResult] | None
    config: type = NoConfig
    table: str | None = None
    conventions: Registry | None = None
    plot: str | None = None
    curve_label: str = ""
    curve_value_label: str = "p(explained class)"
    example: Callable[[Unit, Any], Example] | None = None
    unavailable: str = ""
    applies: Callable[[Unit], str | None] | None = None
    ground_truth: bool = False
    pairing: Callable[[Any, Mapping[str, str]], tuple[str, ...]] | None = None
    eligibility: Callable[..., tuple[Tensor, Tensor]] | None = None
    cost: Callable[[Unit, Any], tuple[MetricCost, ...]] | None = None
    float_floor: float = 0.0
    given_maps: bool = False
    refuses: Callable[[Any], str | None] | None = None

    def evaluates(self, unit: Unit) -> bool:
        """Whether a run scores ``unit`` with this metric (the run and its estimate both ask): it applies to the
        unit's method, and the ``oracle`` control only where the metric knows the evidence."""
        applies = self.applies is None or self.applies(unit) is None
        return applies and (self.ground_truth or not unit.method.capabilities.ground_truth)

    def availability(self, modality: str) -> str | None:
        """Why the metric cannot run in a suite of ``modality`` (None: it can). ``list`` and ``run`` both use it."""
        if modality not in self.modalities:
            return f"{'/'.join(self.modalities)} only"
        if self.evaluate is None:
            return self.unavailable or "not runnable yet"
        return None


@dataclass(kw_only=True)
class Unit:
    """One (model, method) pair as the metric hooks see it.

    Attributes:
        images, labels: the evaluation set, (N, c, H, W) in [0, 1] and (N,), on the host.
        sample_ids: (S,) ids of the images the per-sample metrics use (all processes).
        batch_size: inputs per explanation call.
        max_batch: at most this many inputs per model call, for the method and every metric
            (:attr:`explain_batch`, :attr:`eval_batch`): where the ladder of :func:`faithbench.calls.in_chunks`
            starts, which steps down from it where a call does not fit.
        rank, world: this process's shard: items i with i % world == rank.
        model_cache: shared by every unit of the same model (e.g. its GridPG grids).
        cache: shared by the metrics of this unit (e.g. the sample explanations).
        explain_time: seconds spent explaining, by explanation key (each key its own increment).
        maps: a :class:`~faithbench.metrics.mapstore.MapStore` that records every explanation (``replay=False``) or
            serves them instead of the method (``replay=True``: re-scoring a finished run).
        shared: items shared across the suite's models, by metric name (``bench.pairing.SharedItems``:
            ``eligible`` and ``score`` per item); a metric not in it chooses its items per model.
    """

    model: ModelAdapter
    method: AttributionMethod
    images: Tensor
    labels: Tensor
    sample_ids: Tensor
    batch_size: int
    device: torch.device
    rank: int = 0
    world: int = 1
    model_cache: dict[Hashable, Any] = field(default_factory=dict)
    cache: dict[Hashable, Any] = field(default_factory=dict)
    explain_time: dict[str, float] = field(default_factory=dict)
    max_batch: int = 256
    maps: MapStore | None = None
    replay: bool = False
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def forward(self) -> Callable[..., Tensor]:
        """What a metric calls for the scores of its own inputs (perturbed samples; no gradients): the model's
        module."""
        return self.model.module

    @property
    def explain_batch(self) -> int:
        """Inputs per explanation call."""
        return min(self.batch_size, self.max_batch)

    @property
    def eval_batch(self) -> int:
        """Inputs per plain or perturbed model call of a metric (no gradients): ``max_batch``."""
        return self.max_batch

    def take(self, n: int) -> Tensor:
        """This shard's item indices among ``n`` items (none when there are fewer items than shards before it)."""
        return torch.arange(min(self.rank, n), n, self.world)

    def first_samples(self, limit: int) -> Tensor:
        """(S,) bool: which of :meth:`samples` are among the suite's first ``limit`` samples (0: all of them; a
        piece's positions rise, so they are a prefix of its own)."""
        pos = self.take(len(self.sample_ids))
        return torch.ones(len(pos), dtype=torch.bool) if limit == 0 else pos < limit

    def explain(
        self, inputs: Tensor, targets: Tensor, *, model: ModelAdapter | None = None, tag: str = "model"
    ) -> Tensor:
        """Channel-summed maps (B, H, W) (text: (B, T)) of the unit's method on the unit's model (or on ``model``,
        recorded under ``tag``: a sanity check's randomised copy)."""
        stored = self.maps is not None and not self.method.capabilities.model_free  # controls: cheaper to redo
        if self.replay and stored:
            return self.maps.lookup(tag, inputs, targets)
        maps = self.method.attribute(model or self.model, inputs, targets, max_batch=self.max_batch)
        if stored and not self.replay:
            self.maps.add(tag, inputs, targets, maps)
        return maps

    def per_model(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once for every unit of this model (``model_cache[key]``)."""
        if key not in self.model_cache:
            self.model_cache[key] = compute()
        return self.model_cache[key]

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()`` once for this unit's metrics (``cache[key]``)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def timed_explanation(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` (maps, or a tuple of them) once per unit, its wall time recorded as ``explain_time[key]``."""

        def run() -> Any:
            start = time.perf_counter()
            maps = compute()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.explain_time[key] = time.perf_counter() - start
            return maps

        return self.memo(("explanation", key), run)

    def samples(self) -> tuple[Tensor, Tensor, Tensor]:
        """This shard's per-sample images: (encoded inputs on the device, labels on the device, ids)."""

        def load() -> tuple[Tensor, Tensor, Tensor]:
            ids = self.sample_ids[self.take(len(self.sample_ids))]
            x = self.model.encode(self.images[ids]).to(self.device)
            return x, self.labels[ids].to(self.device), ids

        return self.per_model("samples", load)

    def sample_feature_mask(self) -> Tensor | None:
        """(S, *features) bool on the device: which positions of :meth:`samples` are features (text: not [CLS],
        [SEP] or padding); None for image models (every pixel)."""

        def load() -> Tensor | None:
            _, _, ids = self.samples()
            mask = self.model.feature_mask(self.images[ids])
            return None if mask is None else mask.to(self.device)

        return self.per_model("feature_mask", load)

    def sample_targets(self, target: str = "label") -> Tensor:
        """The classes explained for :meth:`samples`: their ``label`` or the model's ``predicted`` class."""
        x, labels, _ = self.samples()
        if target == "label":
            return labels
        if target != "predicted":
            raise ValueError(f"unknown target {target!r}; valid: label, predicted")

        def predict() -> Tensor:
            b = self.eval_batch
            with torch.no_grad():
                key = (self.model.name, "predict", tuple(x.shape[1:]), "without gradients")
                return torch.cat(in_chunks(lambda s, e: self.model.module(x[s:e]).argmax(dim=1), len(x), b, key=key))

        return self.per_model("predicted", predict)

    def sample_maps(self, target: str = "label") -> Tensor:
        """The method's maps of :meth:`samples` for their labels (or predicted classes), ``batch_size`` at a time.

        Maps for the predicted classes reuse the label maps wherever prediction and label agree and
        explain only the other samples (methods are batch-invariant, tested), so the explain time of
        ``samples:predicted`` is that of the label maps plus the re-explained samples.
        """
        x, t, _ = self.samples()
        b = self.explain_batch

        def explain_all(inputs: Tensor, targets: Tensor) -> Tensor:
            chunks = in_chunks(lambda s, e: self.explain(inputs[s:e], targets[s:e]), len(inputs), b)
            return torch.cat(chunks) if chunks else inputs.new_zeros((0, *inputs.shape[2:]))  # a piece without any

        labels_maps = self.timed_explanation("samples", lambda: explain_all(x, t))
        if target == "label":
            return labels_maps
        predicted = self.sample_targets(target)
        differ = (predicted != t).nonzero().flatten()

        def splice() -> Tensor:
            maps = labels_maps.clone()
            if len(differ):
                maps[differ] = explain_all(x[differ], predicted[differ])
            return maps

        return self.timed_explanation(f"samples:{target}", splice)

    def explanation_seconds(self, key: str) -> float:
        """Wall time of the explanation ``key``, including the explanation it derives from
        (``samples:predicted`` builds on ``samples``)."""
        base = key.split(":")[0]
        return self.explain_time.get(key, 0.0) + (self.explain_time.get(base, 0.0) if base != key else 0.0)
