"""One worker's share of a run: every (model, job) unit in suite order, piece by piece, claimed in the shared folder.

A pass over the suite's models does, for each unit: skip it (the method cannot explain the model), reuse it (the
folder holds it under the same key), or claim and compute its free pieces (:mod:`faithbench.bench.store.pieces`) and,
once all of them exist, merge them into the unit. A worker loads a model only when it has something to do with it;
its first pass loads each model once, for the units' keys. When a model's units are all done, the worker that saw
it last flags its methods with identical maps (:mod:`faithbench.bench.run.fingerprints`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from faithbench.attributions import UnsupportedMethodError
from faithbench.bench.run.evaluate import evaluate_unit, suite_unit
from faithbench.bench.run.fingerprints import fingerprint, identical_pairs
from faithbench.bench.run.pairing import SharedItems
from faithbench.bench.run.plan import Job, Plan, unit_key
from faithbench.bench.store.claims import Claims
from faithbench.bench.store.examples import has_example, save_example
from faithbench.bench.store.identity import warning_line
from faithbench.bench.store.pieces import PieceStore, merge_pieces, piece_name
from faithbench.bench.store.results import RunStore
from faithbench.io import atomic_write_text
from faithbench.metrics.mapstore import MapStore
from faithbench.models import load_model
from faithbench.models.adapter import ModelAdapter
from faithbench.models.data.datasets import EvalData

Pair = tuple[str, str]  # (model, job)


# What run.json records of each model's build info (:func:`model_record`): its held-out accuracy and, for the builds
# that log them, its training budget; the papers' accuracy and training-cost claims are decided from these.
MODEL_INFO = (
    *("source", "test_accuracy", "n_test"),
    *("epochs_run", "kept_epoch", "kept_check", "steps_to_best_validation"),
)


def model_record(info: dict) -> dict:
    """The :data:`MODEL_INFO` entries of a model's info that are plain numbers or strings."""
    return {k: info[k] for k in MODEL_INFO if isinstance(info.get(k), int | float | str)}


@dataclass
class Work:
    """The state of one worker: the units' keys it resolved, the units done, the model it holds."""

    steps: Plan
    data: EvalData
    ids: torch.Tensor
    device: torch.device
    shared: dict[str, SharedItems]
    digest: str
    out: Path
    prov: dict
    on_start: Callable[[], None] = lambda: None  # called before this worker writes its first file
    paused: Callable[[], AbstractContextManager] = nullcontext  # around a model's load (the progress's clock stops)
    keys: dict[Pair, str | None] = field(default_factory=dict)  # None: the method cannot explain the model
    meta: dict[Pair, dict] = field(default_factory=dict)
    done: dict[Pair, dict] = field(default_factory=dict)
    skipped: dict[Pair, str] = field(default_factory=dict)
    computed: set[Pair] = field(default_factory=set)  # units this worker computed a piece of
    verbose: bool = True  # states the identical maps it finds (worker 0; the others keep quiet)
    flagged: set[str] = field(default_factory=set)  # models whose identical maps are checked
    model: ModelAdapter | None = None
    model_name: str | None = None
    model_caches: dict[int, dict] = field(default_factory=dict)  # per piece: what a model's units share (grids)

    def __post_init__(self) -> None:
        self.store, self.pieces = RunStore(self.out), PieceStore(self.out)
        self.claims = Claims(self.out / "claims")
        self.of = self.steps.suite.pieces

    @property
    def total(self) -> int:
        return len(self.steps.suite.models) * len(self.steps.jobs)

    def finished(self) -> bool:
        return len(self.done) + len(self.skipped) == self.total

    def units(self) -> list[dict]:
        """The finished units in suite order."""
        order = [(m, j.name) for m in self.steps.suite.models for j in self.steps.jobs]
        return [self.done[p] for p in order if p in self.done]

    def load(self, name: str) -> ModelAdapter:
        if self.model_name != name:
            self.release_model()
            with self.paused():
                self.model, self.model_name = load_model(name, device=self.device), name
        assert self.model is not None
        return self.model

    def release_model(self) -> None:
        self.model, self.model_name, self.model_caches = None, None, {}

    def model_pass(self, name: str, newly_done: Callable[[Pair, bool], None]) -> bool:
        """Every unit of model ``name`` this worker can move on; ``newly_done(pair, computed_here)`` for each unit
        it sees finished (or skipped) for the first time. Returns whether it computed or merged anything."""
        moved = False
        for job in self.steps.jobs:
            moved |= self._unit(name, job, newly_done)
        self._identities(name)
        self.release_model()
        return moved

    def _unit(self, name: str, job: Job, newly_done: Callable[[Pair, bool], None]) -> bool:
        """One (model, job) unit: skipped, reused, or its free pieces computed and, once all exist, merged; then its
        example map. Returns whether it computed or merged anything."""
        pair = (name, job.name)
        if pair in self.done or pair in self.skipped:
            return False
        if pair not in self.keys:
            self._resolve(name, job)
        key = self.keys[pair]
        if key is None:
            newly_done(pair, False)
            return False
        moved = False
        unit = self.store.load_unit(name, job.name, key)
        if unit is None:
            moved = self._claim_pieces(name, job, key)
            parts = self.pieces.complete(name, job.name, key, self.of)
            if parts is None:
                return moved  # pieces other workers hold
            unit, moved = self._merge(name, job, key, parts), True
        self.done[pair] = unit
        newly_done(pair, pair in self.computed)
        self._example(name, job, key)
        return moved

    def _resolve(self, name: str, job: Job) -> None:
        """The unit's key (needs the model's weights) or the reason the method cannot explain the model."""
        model = self.load(name)
        method = job.build()
        try:
            method.check(model)
        except UnsupportedMethodError as exc:
            self.keys[(name, job.name)] = None
            self.skipped[(name, job.name)] = str(exc)
            return
        plan = self.steps.keys[(name, job.name)]
        self.keys[(name, job.name)] = unit_key(plan, model.weights_sha256, self.digest)
        self.meta[(name, job.name)] = {
            "plan_key": plan,
            "family": model.family,
            "weights_sha256": model.weights_sha256,
            "method_params": method.params,
            "model_info": model_record(model.info),
        }

    def _claim_pieces(self, name: str, job: Job, key: str) -> bool:
        moved = False
        for c in range(self.of):
            if self.pieces.has(name, job.name, key, c, self.of):
                continue
            claim = piece_name(name, job.name, c, self.of)
            if not self.claims.claim(claim):
                continue
            try:
                # finished while we looked, or merged: a merge saves the unit before it deletes the pieces, so a
                # piece gone for that reason is seen here as the unit (computing it again left it behind)
                has = self.pieces.has(name, job.name, key, c, self.of)
                if not has and self.store.load_unit(name, job.name, key) is None:
                    self._compute_piece(name, job, key, c)
                    self.computed.add((name, job.name))
                    moved = True
            finally:
                self.claims.release(claim)
        return moved

    def _compute_piece(self, name: str, job: Job, key: str, c: int) -> None:
        """Piece ``c``: every metric on the unit's items i with i % pieces == c; its maps, then its record."""
        suite = self.steps.suite
        model = self.load(name)
        self.on_start()  # before the first new file of this run (its maps)
        maps = MapStore() if suite.store_maps else None
        unit = suite_unit(suite, model, job.build(), self.data, self.ids, self.device, rank=c, world=self.of,
                          model_cache=self.model_caches.setdefault(c, {}), maps=maps, shared=self.shared)  # fmt: skip
        start = time.perf_counter()
        records = evaluate_unit(unit, self.steps.metrics)
        seconds = time.perf_counter() - start
        if unit.maps is not None and len(unit.maps):
            self.store.save_maps(name, job.name, key, unit.maps.state(), c)
        extra: dict[str, Any] = {"provenance": self.prov, "seconds": seconds}
        if c == 0:
            extra["fingerprint"] = fingerprint(unit)  # the unit's first images: saved, so a resumed run compares it
        self.pieces.save(name, job.name, key, c, self.of, records, **extra)

    def _merge(self, name: str, job: Job, key: str, parts: list[dict]) -> dict:
        """The unit from its pieces (provenance and fingerprint: piece 0's), saved: from here on it is done."""
        record = {
            "key": key,
            "model": name,
            "method": job.name,
            "method_name": job.method,
            **job.columns,
            **self.meta[(name, job.name)],
            "max_batch": self.steps.suite.max_batch,  # the cost columns depend on it, scores do not
            "pieces": self.of,
            "piece_time_s": max(p.get("seconds", 0.0) for p in parts),  # the longest piece: what a worker must allow
            "provenance": parts[0]["provenance"],
            "metrics": merge_pieces(parts),
            "fingerprint": parts[0].get("fingerprint"),
        }
        self.on_start()
        self.store.save_unit(record)
        for c in range(self.of):  # the unit holds all they held (a worker merging at the same time rereads it)
            self.pieces.path(name, job.name, c, self.of).unlink(missing_ok=True)
        return record

    def _example(self, name: str, job: Job, key: str) -> None:
        """The unit's example map for the report's panel, if missing (claimed: one worker draws it)."""
        example = self.steps.example
        if example is None or job.is_control or job.rerun_of is not None or has_example(self.out, name, job.name, key):
            return
        claim = f"{name}__{job.name}.example"
        if not self.claims.claim(claim):
            return
        try:
            self.on_start()
            unit = suite_unit(self.steps.suite, self.load(name), job.build(), self.data, torch.arange(0), self.device)
            save_example(self.out, name, job.name, key, example.spec.example(unit, example.config))
        finally:
            self.claims.release(claim)

    def identity_path(self, name: str) -> Path:
        return self.out / "identical" / f"{name}.json"

    def _identities(self, name: str) -> None:
        """Once every unit of model ``name`` is done: its method pairs with identical maps, saved per model (the
        check needs the model itself: whether a known identity holds depends on its layers) and, by worker 0,
        stated once (a resumed run states them again)."""
        pairs = [(name, j.name) for j in self.steps.jobs]
        if name in self.flagged or any(p not in self.done and p not in self.skipped for p in pairs):
            return
        units = [self.done[p] for p in pairs if p in self.done]
        keys = sorted(u["key"] for u in units)
        try:
            record = json.loads(self.identity_path(name).read_text())
        except (OSError, ValueError):
            record = {}
        found = record.get("pairs", []) if isinstance(record, dict) and record.get("keys") == keys else None
        if found is None:
            found = identical_pairs(self.load(name), units)
            self.identity_path(name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.identity_path(name), json.dumps({"keys": keys, "pairs": found}))
        if self.verbose:
            for pair in found:
                tqdm.write(warning_line(pair), file=sys.stderr)
        self.flagged.add(name)

    def identical(self) -> list[dict]:
        """The flagged pairs of every model whose units are all done, in suite order."""
        out = []
        for name in self.steps.suite.models:
            keys = sorted(u["key"] for (m, _), u in self.done.items() if m == name)
            try:
                record = json.loads(self.identity_path(name).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("keys") == keys:
                out += record.get("pairs", [])
        return out
