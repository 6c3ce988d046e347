"""How a worker computes its share of a run: every (model, job) unit in suite order, piece by piece.

A pass over the suite's models does, for each unit: skip it (the method cannot explain the model), reuse it, or
compute the pieces it claims and merge them -- what the folder's files allow is decided by
:class:`~faithbench.bench.store.unit_files.UnitFiles`; here is how a unit is computed: its model loaded, its key
resolved (it needs the weights), a piece evaluated, its example drawn. A worker loads a model only when it has
something to do with it; its first pass loads each model once, for the units' keys. When a model's units are all
done, the worker that saw it last flags its methods with identical maps (:mod:`faithbench.bench.run.fingerprints`).

The work flows one way: :meth:`Work.run` yields what happened (:data:`Event`), and the runner turns the events into
progress and writes; the work calls nothing of the runner's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

from faithbench.attributions import UnsupportedMethodError
from faithbench.bench.run.evaluate import evaluate_unit, suite_unit
from faithbench.bench.run.fingerprints import fingerprint, identical_pairs
from faithbench.bench.run.pairing import SharedItems
from faithbench.bench.run.plan import Job, Plan, unit_key
from faithbench.bench.store.identity import warning_line
from faithbench.bench.store.unit_files import Piece, UnitFiles, UnitRef
from faithbench.calls import call_rows, found_sizes
from faithbench.metrics.mapstore import MapStore
from faithbench.models import load_model
from faithbench.models.adapter import ModelAdapter
from faithbench.models.data.datasets import EvalData

Pair = tuple[str, str]  # (model, job)


# What run.json records of each model's build info (:func:`model_record`): its held-out accuracy with the per-item
# results behind it (paired accuracy differences) and, for the builds that log them, its training budget and
# accuracy by epoch; the papers' accuracy and training-cost claims are decided from these.
MODEL_INFO = (
    *("source", "test_accuracy", "n_test", "test_correct", "test_predicted_classes"),
    *("epochs_run", "kept_epoch", "kept_check", "steps_to_best_validation"),
    *("accuracy_before_finetuning", "test_accuracy_by_epoch"),
)


def _plain(value: object) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    numbers = isinstance(value, list | tuple) and all(isinstance(v, int | float) for v in value)
    return number or isinstance(value, str) or numbers


def model_record(info: dict) -> dict:
    """The :data:`MODEL_INFO` entries of a model's info that are plain numbers, strings or lists of numbers."""
    return {k: list(info[k]) if isinstance(info[k], tuple) else info[k] for k in MODEL_INFO if _plain(info.get(k))}


class Outcome(NamedTuple):
    """What a worker's run has come to: the finished units in suite order, the skipped pairs with the reason, the
    flagged method pairs of the models whose units are all done."""

    units: list[dict]
    skipped: dict[Pair, str]
    identical: list[dict]


class Loaded(NamedTuple):
    """A model loaded in ``seconds`` (not part of the units' pace)."""

    model: str
    seconds: float


class Writing(NamedTuple):
    """A file of this run is about to be written: the first one takes the folder over."""


class Finished(NamedTuple):
    """A unit this worker sees finished (or skipped) for the first time; ``computed``: it computed a piece of it."""

    pair: Pair
    computed: bool


Event = Loaded | Writing | Finished
Steps = Generator[Event, None, bool]  # a step of the work: its events, then whether it computed or merged anything


@dataclass(kw_only=True)
class Work:
    """The state of one worker: the units' keys it resolved, the units done, the model it holds. ``files``: what the
    folder lets it do next; ``verbose``: states the identical maps it finds (worker 0; the others keep quiet)."""

    plan: Plan
    data: EvalData
    ids: torch.Tensor
    device: torch.device
    shared: dict[str, SharedItems]
    digest: str
    prov: dict
    files: UnitFiles
    verbose: bool = True
    keys: dict[Pair, str | None] = field(default_factory=dict, init=False)  # None: the method cannot explain it
    meta: dict[Pair, dict] = field(default_factory=dict, init=False)
    done: dict[Pair, dict] = field(default_factory=dict, init=False)
    skipped: dict[Pair, str] = field(default_factory=dict, init=False)
    computed: set[Pair] = field(default_factory=set, init=False)  # units this worker computed a piece of
    flagged: set[str] = field(default_factory=set, init=False)  # models whose identical maps are checked
    model: ModelAdapter | None = field(default=None, init=False)
    model_caches: dict[int, dict] = field(default_factory=dict, init=False)  # per piece: what units share (grids)

    @property
    def total(self) -> int:
        return len(self.plan.keys)  # one per (model, job)

    def finished(self) -> bool:
        return len(self.done) + len(self.skipped) == self.total

    def run(self, wait: bool, poll_s: float) -> Iterator[Event]:
        """Passes over the suite's models until every unit is done or, unless ``wait``, nothing is left that this
        worker can do (the others' pieces); waiting, it looks again every ``poll_s`` s. Then :meth:`finished` says
        whether the run is."""
        while True:
            moved = False
            for name in self.plan.suite.models:
                moved |= yield from self._model_pass(name)
            if self.finished() or (not moved and not wait):
                return
            if not moved:
                time.sleep(poll_s)

    def outcome(self) -> Outcome:
        order = [(m, j.name) for m in self.plan.suite.models for j in self.plan.jobs]
        keys = {m: sorted(u["key"] for (n, _), u in self.done.items() if n == m) for m in self.plan.suite.models}
        return Outcome([self.done[p] for p in order if p in self.done], dict(self.skipped), self.files.identical(keys))

    def _load(self, name: str) -> Iterator[Event]:
        """Model ``name`` in :attr:`model` (loaded unless it is there)."""
        if self.model is None or self.model.name != name:
            self.model, self.model_caches = None, {}
            start = time.perf_counter()
            self.model = load_model(name, device=self.device)
            yield Loaded(name, time.perf_counter() - start)

    @property
    def max_batch(self) -> int:
        """Inputs per model call at most, where :func:`faithbench.calls.in_chunks` starts on this device."""
        return call_rows(self.plan.suite.max_batch, self.device)

    def _model_pass(self, name: str) -> Steps:
        """Every unit of model ``name`` this worker can move on; whether it computed or merged anything."""
        moved = False
        for job in self.plan.jobs:
            moved |= yield from self._unit(name, job)
        yield from self._identities(name)
        self.model, self.model_caches = None, {}
        return moved

    def _unit(self, name: str, job: Job) -> Steps:
        """One (model, job) unit: skipped, reused, or its free pieces computed and, once all exist, merged; then its
        example map."""
        pair = (name, job.name)
        if pair in self.done or pair in self.skipped:
            return False
        if pair not in self.keys:
            yield from self._load(name)
            self._resolve(name, job)
        key = self.keys[pair]
        if key is None:
            yield Finished(pair, False)
            return False
        ref, moved = UnitRef(name, job.name, key), False
        unit = self.files.unit(ref)
        if unit is None:
            moved = yield from self._compute_pieces(ref, job)
            if moved:
                self.computed.add(pair)
            if not self.files.complete(ref):
                return moved  # pieces other workers hold
            yield Writing()
            unit = self.files.merge(ref, self._head(ref, job))
            if unit is None:
                return moved  # merged by another worker in between: seen on the next pass
            moved = True
        self.done[pair] = unit
        yield Finished(pair, pair in self.computed)
        if self.plan.example is not None and not job.is_control and job.rerun_of is None:
            with self.files.example_claim(ref) as mine:
                if mine:
                    yield Writing()
                    yield from self._load(name)
                    example = self.plan.example
                    unit_now = self._unit_of(job, torch.arange(0))
                    self.files.save_example(ref, example.spec.example(unit_now, example.config))
        return moved

    def _compute_pieces(self, ref: UnitRef, job: Job) -> Steps:
        """The unit's free pieces this worker can claim, each computed and saved; whether it computed any."""
        moved = False
        for c in self.files.free_pieces(ref):
            with self.files.piece_claim(ref, c) as mine:
                if mine:
                    yield Writing()
                    yield from self._load(ref.model)
                    self.files.save_piece(ref, c, self._piece(job, c))
                    moved = True
        return moved

    def _resolve(self, name: str, job: Job) -> None:
        """The unit's key (needs the weights of :attr:`model`) or the reason the method cannot explain the model."""
        model, method = self.model, job.build()
        assert model is not None and model.name == name
        try:
            method.check(model)
        except UnsupportedMethodError as exc:
            self.keys[(name, job.name)] = None
            self.skipped[(name, job.name)] = str(exc)
            return
        plan_key = self.plan.keys[(name, job.name)]
        self.keys[(name, job.name)] = unit_key(plan_key, model.weights_sha256, self.digest)
        self.meta[(name, job.name)] = {
            "plan_key": plan_key,
            "family": model.family,
            "weights_sha256": model.weights_sha256,
            "method_params": method.params,
            "cost_params": sorted(method.cost_params),  # of method_params: batching only (compare: cost)
            "model_info": model_record(model.info),
            # the cost columns depend on them, scores do not (a re-score replays them)
            "max_batch": self.max_batch,
            "batch_size": self.plan.suite.batch_size,
            # what the rows say of the data (``compare`` and ``report`` combine runs on them)
            "dataset": self.plan.suite.dataset,
            "n_samples": self.plan.suite.n_samples,
            "data_root": self.plan.suite.data_root or "",
        }

    def _unit_of(self, job: Job, ids: torch.Tensor, **state: Any) -> Any:
        """The unit of :attr:`model` and ``job`` on the items ``ids``."""
        assert self.model is not None
        return suite_unit(
            self.plan.suite, self.model, job.build(), self.data, ids, self.device, self.max_batch, **state
        )

    def _piece(self, job: Job, c: int) -> Piece:
        """Piece ``c``: every metric on the unit's items i with i % pieces == c, with its maps."""
        of = self.files.pieces
        maps = MapStore() if self.plan.suite.store_maps else None
        unit = self._unit_of(job, self.ids, rank=c, world=of, model_cache=self.model_caches.setdefault(c, {}),
                             maps=maps, shared=self.shared)  # fmt: skip
        start, before = time.perf_counter(), found_sizes()
        records = evaluate_unit(unit, self.plan.metrics)
        extra: dict[str, Any] = {"provenance": self.prov, "seconds": time.perf_counter() - start}
        if c == 0:
            extra["fingerprint"] = fingerprint(unit)  # the unit's first images: saved, so a resumed run compares it
        extra["call_sizes"] = {k: v for k, v in found_sizes().items() if before.get(k) != v}  # stepped down to
        kept = unit.maps.state() if unit.maps is not None and len(unit.maps) else None
        return Piece(records, kept, extra)

    def _head(self, ref: UnitRef, job: Job) -> dict:
        """What a merged unit records before its pieces' records: its names, key, columns and model."""
        return {
            "key": ref.key,
            "model": ref.model,
            "method": job.name,
            "method_name": job.method,
            **job.columns,
            **self.meta[(ref.model, job.name)],
        }

    def _identities(self, name: str) -> Iterator[Event]:
        """Once every unit of model ``name`` is done: its method pairs with identical maps, saved per model (the
        check needs the model itself: whether a known identity holds depends on its layers) and, by worker 0,
        stated once (a resumed run states them again)."""
        pairs = [(name, j.name) for j in self.plan.jobs]
        if name in self.flagged or any(p not in self.done and p not in self.skipped for p in pairs):
            return
        units = [self.done[p] for p in pairs if p in self.done]
        keys = sorted(u["key"] for u in units)
        found = self.files.identities(name, keys)
        if found is None:
            yield from self._load(name)
            found = identical_pairs(self.model, units)
            self.files.save_identities(name, keys, found)
        if self.verbose:
            for pair in found:
                tqdm.write(warning_line(pair), file=sys.stderr)
        self.flagged.add(name)
