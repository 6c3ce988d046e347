"""The run loop: suite -> (model x method) units -> result files, resumable and shardable.

A unit explains one model with one method and computes every metric of the suite from those
explanations (:mod:`faithbench.bench.run.evaluate`). Finished units are saved atomically under a key of
everything their scores depend on -- the suite's evaluation settings, the model's weights, the
method and its parameters, faithbench's code -- and reused when the same command runs again.
Under ``torchrun`` every rank evaluates a shard and rank 0 gathers the per-sample scores, so the
results equal a single-process run (:mod:`faithbench.bench.run.distributed`). Nothing is written before the
suite, the data and the first model have loaded. Once a model's units are done, any two of its
methods whose maps agree are flagged (:mod:`faithbench.bench.run.identity`). The zoo models the suite lacks are
built before the first unit, under their own progress; the units' progress (:mod:`faithbench.progress`: bars in a
terminal, plain lines in a log) paces only the units computed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from faithbench.attributions import UnsupportedMethodError
from faithbench.bench.run.data import EvalData, load_data
from faithbench.bench.run.distributed import Shard
from faithbench.bench.run.evaluate import evaluate_unit, merge_shards, suite_unit
from faithbench.bench.run.examples import has_example, save_example
from faithbench.bench.run.folder_lock import FolderLock
from faithbench.bench.run.identity import fingerprint, identical_pairs, warning_line
from faithbench.bench.run.identity import write as write_identical
from faithbench.bench.run.pairing import SharedItems, save_shared, share_items, shared_digest
from faithbench.bench.run.plan import Job, Plan, plan, resume_count, unit_key
from faithbench.bench.run.provenance import provenance
from faithbench.bench.run.results import RunStore
from faithbench.bench.run.suite import Suite
from faithbench.errors import UserError
from faithbench.io import atomic_write_text
from faithbench.metrics.mapstore import MapStore
from faithbench.models import load_model, zoo
from faithbench.models.adapter import ModelAdapter
from faithbench.progress import progress_bar, quiet

# Rewriting the result tables takes ~1 s on a full suite: after a unit they are rewritten at most this
# often, and always when the run ends or is interrupted.
FLUSH_EVERY_S = 20.0


def resolve_device(device: str) -> torch.device:
    name = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"device {device!r} does not exist: {torch.cuda.device_count()} GPU(s) visible")
        # Full fp32 convolutions and matmuls: TF32 (cuDNN's default) moves scores by ~1e-3 relative,
        # and results must agree with the CPU within the tolerance the CUDA tests state.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    elif dev.type != "cpu":
        raise UserError(f"device {device!r} is not supported; valid: auto, cpu, cuda, cuda:N")
    return dev


def sample_ids(suite: Suite, n_images: int) -> torch.Tensor:
    """The images of the per-sample metrics: a seeded draw of ``n_samples``, sorted."""
    gen = torch.Generator().manual_seed(suite.seed)
    return torch.randperm(n_images, generator=gen)[: suite.n_samples].sort().values


def _load_model(name: str, device: torch.device, shard: Shard) -> ModelAdapter:
    """Rank 0 builds (or loads) a zoo model first, so that ranks never build the same checkpoint at once."""
    if shard.rank != 0:
        shard.barrier()
    model = load_model(name, device=device)
    if shard.rank == 0:
        shard.barrier()
    return model


def _build_zoo(names: Sequence[str], shard: Shard) -> None:
    """Rank 0 builds every zoo checkpoint the suite lacks before the first unit (with its own progress and ETA:
    a build trains for minutes on a CPU and must not enter the units' pace); the other ranks wait."""
    if shard.rank == 0:
        zoo.build_missing(names)
    shard.barrier()


class _Writer:
    """Rank 0's result files. Nothing is written before the first unit starts; from then on run.json (the
    suite, provenance and the manifest of finished units) and the tables always describe this run."""

    def __init__(self, out: Path, suite: Suite, prov: dict, active: bool, shared: dict[str, SharedItems]) -> None:
        self.store, self.suite, self.prov, self.active = RunStore(out), suite, prov, active
        self.shared = shared
        self.done: list[dict] = []
        self.skipped: list[dict] = []
        self.identical: list[dict] = []  # method pairs with the same maps (bench.identity)
        self.started = False
        self.flushed_at = -FLUSH_EVERY_S  # the first finished unit is written at once

    def start(self) -> None:
        """Take the folder over for this run: a previous run's tables and manifest are replaced at once."""
        if self.active and not self.started:
            self.started = True
            save_shared(self.store.out, self.shared)  # rescore rebuilds the same items from it
            self.flush()

    def add(self, unit: dict, new: bool) -> None:
        self.done.append(unit)
        if self.active:
            self.start()
            if new:
                self.store.save_unit(unit)  # the unit is safe from here on; the tables are derived from units
            if time.monotonic() - self.flushed_at >= FLUSH_EVERY_S:
                self.flush()

    def skip(self, model: str, method: str, reason: str) -> None:
        self.skipped.append({"model": model, "method": method, "reason": reason})

    def check_identities(self, model: ModelAdapter, name: str) -> None:
        """Flag the methods of model ``name`` whose maps agree, once all its units are done."""
        pairs = identical_pairs(model, [u for u in self.done if u["model"] == name])
        for pair in pairs:
            tqdm.write(warning_line(pair), file=sys.stderr)
        self.identical += pairs

    def flush(self) -> pd.DataFrame:
        self.flushed_at = time.monotonic()
        atomic_write_text(self.store.out / "skipped.json", json.dumps(self.skipped, indent=2))
        write_identical(self.store.out, self.identical)
        frame = self.store.write_tables(self.done, self.suite.name)
        shared = {name: items.record() for name, items in self.shared.items()}
        self.store.save_record(self.suite.to_dict(), self.prov, self.done, shared)  # last: it names the units
        return frame


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster scheduler's stop, ``kill PID``), handled like Ctrl-C: finished units are kept."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def run(suite: Suite, out: Path, device: str = "auto", progress: bool = True) -> Any:
    """Run (or resume) ``suite`` into folder ``out``; returns the results table (rank 0) or None.

    The folder is locked for the whole run (:class:`faithbench.bench.run.folder_lock.FolderLock`: one writer, released
    however the process ends); SIGTERM is handled like Ctrl-C (``KeyboardInterrupt``)."""
    out = Path(out)
    shard, dev = Shard.start(resolve_device(device))
    lock = FolderLock(out, f"bench run --suite {suite.name}")
    error = None
    if shard.rank == 0:
        try:
            lock.acquire()
        except UserError as exc:
            error = str(exc)
    error = shard.broadcast(error)
    if error is not None:
        shard.close()
        raise UserError(error)
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set signal handlers
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread else None
    try:
        with quiet() if not progress or shard.rank != 0 else contextlib.nullcontext():  # one rank draws
            return _run(suite, out, dev, shard, progress)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        lock.release(remove_if_empty=True)


def _run(suite: Suite, out: Path, dev: torch.device, shard: Shard, progress: bool) -> Any:
    steps = plan(suite)  # every name, config and key resolved before any model loads
    data = load_data(suite)
    ids = sample_ids(suite, len(data.labels))
    batch = min(4 * suite.batch_size, suite.max_batch)
    _build_zoo(suite.models, shard)
    shared = share_items(steps, data, dev, lambda name: _load_model(name, dev, shard), batch)
    digest = shared_digest(shared)  # part of every unit's key: the items depend on every deciding model
    writer = _Writer(out, suite, provenance(dev, suite.seed), shard.rank == 0, shared)
    total = len(suite.models) * len(steps.jobs)
    if shard.rank == 0 and (out / "run.json").exists():
        tqdm.write(f"resuming {out}: {resume_count(writer.store, steps.keys)} of {total} units done", file=sys.stderr)
    # A bar in a terminal, plain lines in a log; its ETA counts only the units computed here (not those reused from
    # an earlier run or skipped) and leaves out the time models take to load.
    bar = progress_bar(
        total=total, desc=f"suite {suite.name}", unit="unit", disable=not progress or shard.rank != 0, file=sys.stderr
    )
    try:
        for model_name in suite.models:
            with bar.paused():
                model = _load_model(model_name, dev, shard)
            model_cache: dict = {}
            for job in steps.jobs:
                bar.set_postfix_str(f"{model_name} / {job.name}")
                computed = _run_job(steps, job, model_name, model, model_cache, data, ids, dev, shard, writer, digest)
                bar.update(timed=computed)
            if shard.rank == 0:
                writer.check_identities(model, model_name)
            del model, model_cache
    except BaseException:  # an interrupt or an error: the tables still show every finished unit
        if writer.active and writer.started:
            try:
                writer.flush()
            except Exception as exc:  # keep the original exception (e.g. the interrupt) in front
                tqdm.write(f"could not rewrite the result tables: {exc}", file=sys.stderr)
        raise
    bar.close()
    shard.close()
    if shard.rank != 0:
        return None
    writer.start()  # every pair skipped: still record what was asked
    return writer.flush()


def _run_job(
    steps: Plan,
    job: Job,
    model_name: str,
    model: ModelAdapter,
    model_cache: dict,
    data: EvalData,
    ids: torch.Tensor,
    dev: torch.device,
    shard: Shard,
    writer: _Writer,
    digest: str,
) -> bool:
    """One (model, job) unit: skipped if the method cannot explain the model, reused if the folder holds it under
    the same key, otherwise explained, scored, its maps and record saved; then its example map (rank 0). Returns
    whether it was computed (not skipped, not reused)."""
    suite = steps.suite
    method = job.build()
    try:
        method.check(model)
    except UnsupportedMethodError as exc:
        writer.skip(model_name, job.name, str(exc))
        return False
    plan_key_ = steps.keys[(model_name, job.name)]
    key = unit_key(plan_key_, model.weights_sha256, digest)
    stored = writer.store.load_unit(model_name, job.name, key) if shard.rank == 0 else None
    cached = shard.broadcast(stored)
    if cached is not None:
        writer.add(cached, new=False)
    else:
        writer.start()  # before the first new file of this run (its maps)
        maps = MapStore() if suite.store_maps else None
        unit = suite_unit(suite, model, method, data, ids, dev, rank=shard.rank, world=shard.world,
                          model_cache=model_cache, maps=maps, shared=writer.shared)  # fmt: skip
        parts = shard.gather(evaluate_unit(unit, steps.metrics))
        if unit.maps is not None and len(unit.maps):  # each rank its shard's maps, before the unit is done
            writer.store.save_maps(model_name, job.name, key, unit.maps.state(), shard.rank)
        if shard.rank == 0:
            record = {
                "key": key,
                "plan_key": plan_key_,
                "model": model_name,
                "method": job.name,
                "method_name": job.method,
                **job.columns,
                "family": model.family,
                "weights_sha256": model.weights_sha256,
                "method_params": method.params,
                "max_batch": suite.max_batch,  # the cost columns depend on it, scores do not
                "provenance": writer.prov,
                "metrics": merge_shards(parts),
                "fingerprint": fingerprint(unit),  # saved, so a resumed run still compares it
            }
            writer.add(record, new=True)
    example = steps.example
    shown = example is not None and not job.is_control and job.rerun_of is None
    if shown and writer.active and not has_example(writer.store.out, model_name, job.name, key):
        writer.start()
        unit = suite_unit(suite, model, job.build(), data, torch.arange(0), dev)  # the example's own unit
        save_example(writer.store.out, unit, example.spec, example.config, model_name, job.name, key)
    return cached is None
