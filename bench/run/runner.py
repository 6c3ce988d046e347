"""The run loop: suite -> (model x method) units -> result files, resumable and shared by any number of workers.

A unit explains one model with one method and computes every metric of the suite from those explanations
(:mod:`faithbench.bench.run.evaluate`); it is computed in ``pieces`` pieces (suite key, default 1) that workers
claim in the run folder (:mod:`faithbench.bench.run.work`), so torchrun's ranks, the tasks of a job array or a
second ``bench run`` of the same suite share a run, and its results are the same bytes whatever the number of
workers. Finished pieces and units are saved atomically under a key of everything their scores depend on -- the
suite's evaluation settings, the model's weights, the method and its parameters, faithbench's code -- and reused
when the same command runs again, with any number of workers. Nothing is written before the suite, the data and the
first model have loaded. The zoo models the suite lacks are built before the first unit, under their own progress;
the units' progress (:mod:`faithbench.progress`: bars in a terminal, plain lines in a log) paces only the units
computed.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from faithbench.bench.run.data import load_data
from faithbench.bench.run.distributed import Worker, device_named
from faithbench.bench.run.fit import check_own_models, held_out_accuracy
from faithbench.bench.run.pairing import SharedItems, save_shared, share_items, shared_digest
from faithbench.bench.run.plan import Plan, resolve, resume_count
from faithbench.bench.run.preflight import check_before_compute
from faithbench.bench.run.provenance import provenance, registry_catalog
from faithbench.bench.run.suite import Suite
from faithbench.bench.run.suite_files import plugin_folders
from faithbench.bench.run.work import Finished, Loaded, Outcome, Work, Writing
from faithbench.bench.store.folder_lock import FolderLock
from faithbench.bench.store.identity import write as write_identical
from faithbench.bench.store.results import RunStore
from faithbench.bench.store.unit_files import UnitFiles
from faithbench.calls import call_rows
from faithbench.errors import UserError
from faithbench.io import atomic_write_text
from faithbench.models import load_model, zoo
from faithbench.progress import progress_bar, quiet

# Rewriting the result tables takes ~1 s on a full suite: after a unit they are rewritten at most this
# often, and always when the run ends or is interrupted.
FLUSH_EVERY_S = 20.0
POLL_S = 5.0  # how often worker 0, with nothing left to claim, looks whether the other workers' pieces are done


def resolve_device(device: str) -> torch.device:
    dev = device_named(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {device!r} requested but CUDA is not available; use --device cpu")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"device {device!r} does not exist: {torch.cuda.device_count()} GPU(s) visible")
        # Full fp32 convolutions and matmuls: TF32 (cuDNN's default) moves scores by ~1e-3 relative,
        # and results must agree with the CPU within the tolerance the CUDA tests state.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return dev


def sample_ids(suite: Suite, n_images: int) -> torch.Tensor:
    """The images of the per-sample metrics: a seeded draw of ``n_samples``, sorted."""
    gen = torch.Generator().manual_seed(suite.seed)
    return torch.randperm(n_images, generator=gen)[: suite.n_samples].sort().values


class _Writer:
    """A worker's result files. Nothing is written before the first unit starts; from then on run.json (the suite,
    provenance and the manifest of finished units) and the tables always describe this run, as the work's
    :class:`~faithbench.bench.run.work.Outcome` has it."""

    def __init__(
        self, *, out: Path, plan: Plan, shared: dict[str, SharedItems], prov: dict, accuracy: dict[str, dict]
    ) -> None:
        self.out, self.plan, self.shared, self.prov = out, plan, shared, prov
        self.accuracy = accuracy  # each model's held-out accuracy on the run's data (:mod:`.fit`)
        self.store = RunStore(out)
        self.plugins_from = plugin_folders(plan.suite.plugins)  # once: run.json records it at every flush
        self.catalog = registry_catalog().to_dict()  # once too (the registries, plugins imported, for the report)
        self.started = False
        self.flushed_at = -FLUSH_EVERY_S  # the first finished unit is written at once

    def start(self, outcome: Outcome) -> None:
        """Take the folder over for this run: a previous run's tables and manifest are replaced at once."""
        if not self.started:
            self.started = True
            save_shared(self.out, self.shared)  # rescore rebuilds the same items from it
            self.flush(outcome)

    def maybe_flush(self, outcome: Outcome) -> None:
        if time.monotonic() - self.flushed_at >= FLUSH_EVERY_S:
            self.flush(outcome)

    def flush(self, outcome: Outcome) -> pd.DataFrame:
        self.flushed_at = time.monotonic()
        units, skipped, identical = outcome
        reasons = [{"model": m, "method": j, "reason": why} for (m, j), why in skipped.items()]
        atomic_write_text(self.out / "skipped.json", json.dumps(reasons, indent=2))
        write_identical(self.out, identical)
        frame = self.store.write_tables(units, self.plan.suite.name)
        shared = {name: items.record() for name, items in self.shared.items()}
        # last: it names the units
        self.store.save_record(
            self.plan.record, self.prov, units, shared, self.plugins_from, self.catalog, self.accuracy
        )
        return frame


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster scheduler's stop, ``kill PID``), handled like Ctrl-C: finished pieces are kept."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


def run(
    suite: Suite,
    out: Path,
    device: str = "auto",
    progress: bool = True,
    worker: Worker | None = None,
    handle_sigterm: bool = True,
) -> Any:
    """Run (or resume, or join) ``suite`` in folder ``out``; returns the results table (worker 0) or None.

    The workers of the run share the folder (:class:`faithbench.bench.store.folder_lock.FolderLock` with the run's id:
    another run, or ``rescore``, is refused while one works); SIGTERM is handled like Ctrl-C
    (``KeyboardInterrupt``): the finished pieces stay, the claimed ones are given back. ``worker``: this process
    among the run's workers when a launcher says so (a job array's task; default: torchrun's rank, or 0 of 1);
    ``handle_sigterm=False`` leaves SIGTERM to the launcher (submitit requeues the task on it)."""
    plan = resolve(suite)
    check_before_compute([plan.suite, *(tier.plan.suite for tier in plan.tiers)])  # before any folder is made
    with torch_settings_kept():  # the device's settings (full-fp32 CUDA) last as long as the run, not beyond it
        return _run_plan(plan, Path(out), device, progress, worker, handle_sigterm)


@contextlib.contextmanager
def torch_settings_kept() -> Any:
    """Restore the process-wide torch flags that :func:`resolve_device` sets (TF32) when the block ends."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def _run_plan(plan: Plan, out: Path, device: str, progress: bool, worker: Worker | None, handle_sigterm: bool) -> Any:
    """The run of ``plan`` (every name, config and key resolved before any model loads), then its tiers'."""
    suite = plan.suite
    started, dev = Worker.start(resolve_device(device))
    worker = worker or started
    resuming = worker.first and (out / "run.json").exists()
    lock = FolderLock(out, f"bench run --suite {suite.name}", run_id=plan.run_id).acquire()
    # only the main thread may set signal handlers
    main_thread = handle_sigterm and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread else None
    try:
        with quiet() if not progress or not worker.first else contextlib.nullcontext():  # one worker draws
            results = _run(plan, out, dev, worker, progress, resuming)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        lock.release(remove_if_empty=True)
    for tier in plan.tiers:  # e.g. the ground-truth tier: its own suite and folder, this run's seed
        _run_plan(tier.plan, out / tier.folder, device, progress, worker, handle_sigterm)
    return results


def _run(plan: Plan, out: Path, dev: torch.device, worker: Worker, progress: bool, resuming: bool) -> Any:
    suite = plan.suite
    data = load_data(suite)
    ids = sample_ids(suite, len(data.labels))
    batch = call_rows(suite.max_batch, dev)  # inputs per call at most: where faithbench.calls' ladder starts
    check_own_models(suite, data, dev)  # a user's model that does not fit: refused here
    accuracy: dict[str, dict] = {}
    if worker.first:  # the builds under their own progress; another worker waits on a build's lock, then loads
        zoo.build_missing(suite.models)
        accuracy = held_out_accuracy(suite, data, dev, batch)  # every model's line, recorded in run.json

    shared = share_items(plan, data, dev, lambda name: load_model(name, device=dev), batch)
    digest = shared_digest(shared)  # part of every unit's key: the items depend on every deciding model
    prov = provenance(dev, suite.seed)
    writer = _Writer(out=out, plan=plan, shared=shared, prov=prov, accuracy=accuracy)
    files = UnitFiles(out=out, pieces=suite.pieces)
    total = len(plan.keys)  # one per (model, job)
    if resuming:
        tqdm.write(f"resuming {out}: {resume_count(files.store, plan.keys)} of {total} units done", file=sys.stderr)
    # A bar in a terminal, plain lines in a log; its ETA counts only the units computed here (not those reused from
    # an earlier run, skipped or computed by another worker) and leaves out the time models take to load.
    bar = progress_bar(
        total=total, desc=f"suite {suite.name}", unit="unit", disable=not progress or not worker.first, file=sys.stderr
    )
    work = Work(plan=plan, data=data, ids=ids, device=dev, shared=shared, digest=digest, prov=prov, files=files,
                verbose=worker.first)  # fmt: skip
    try:  # worker 0 waits for the others' pieces
        for event in work.run(wait=worker.first, poll_s=POLL_S):
            if isinstance(event, Loaded):
                bar.exclude(event.seconds)
            elif isinstance(event, Writing):
                writer.start(work.outcome())
            elif isinstance(event, Finished):
                bar.set_postfix_str(" / ".join(event.pair))
                bar.update(timed=event.computed)
                if event.computed:
                    writer.maybe_flush(work.outcome())
    except BaseException:  # an interrupt or an error: the tables still show every finished unit
        files.close()
        if writer.started:
            try:
                writer.flush(work.outcome())
            except Exception as exc:  # keep the original exception (e.g. the interrupt) in front
                tqdm.write(f"could not rewrite the result tables: {exc}", file=sys.stderr)
        raise
    files.close()
    bar.close()
    if not work.finished():
        return None
    writer.start(work.outcome())  # every pair skipped: still record what was asked
    frame = writer.flush(work.outcome())
    return frame if worker.first else None
