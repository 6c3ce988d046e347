"""``python -m bench run`` and ``python -m bench report``: run a suite into a folder, then write its report."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pandas as pd

from faithbench.bench.cli.parser import table_overrides
from faithbench.bench.cli.reporting import say
from faithbench.bench.cli.workers import LocalWorkers, worker_count
from faithbench.bench.estimate.dry_run import dry_run_text
from faithbench.bench.report.build import headline, report
from faithbench.bench.report.formats import WIDTH, to_text
from faithbench.bench.run.launch import SlurmSettings, submit, wait_for
from faithbench.bench.run.preflight import readiness
from faithbench.bench.run.question import question
from faithbench.bench.run.runner import Terminated, run
from faithbench.bench.run.suite import Suite, build_suite, load_suite, with_overrides
from faithbench.bench.run.suite_files import import_plugins
from faithbench.bench.store.results import read_results, tier_folder
from faithbench.errors import UserError


@contextlib.contextmanager
def no_progress_bars(disable: bool) -> Iterator[None]:
    """--no-progress also silences the zoo's training bars (tqdm reads its defaults from TQDM_* variables)."""
    old = os.environ.get("TQDM_DISABLE")
    if disable:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = old


def run_suite(args: argparse.Namespace) -> Suite:
    """The suite a ``run`` command asks for: ``--suite`` with the options as overrides; without it, a question
    (``--models`` / ``--methods`` / ``--metrics``) at the library's defaults, as ``benchmark()`` builds it; with
    neither, the embedded default ``vision``."""
    if args.no_controls and args.controls:
        raise UserError("--controls and --no-controls contradict each other; give one")
    controls = [] if args.no_controls else (True if args.controls == ["all"] else args.controls)
    plugins = import_plugins(args.plugins or [], "--plugins:", None)  # before any name is looked up
    if args.suite is None and (args.models or args.methods or args.metrics):
        data = question(args.models, args.methods, args.metrics, dataset=args.dataset, data_root=args.data_root)
        data["plugins"] = list(plugins)
        base = build_suite({**data, "controls": controls or False}, "command line")
    else:
        base = load_suite(args.suite or "vision")
    return with_overrides(
        base,
        models=args.models,
        methods=args.methods,
        metrics=args.metrics,
        dataset=args.dataset or ("imagefolder" if args.data_root else None),
        seed=args.seed,
        n_samples=args.n_samples,
        batch_size=args.batch_size,
        max_batch=args.max_batch,
        pieces=args.pieces,
        data_root=args.data_root,
        tables=table_overrides(args),
        controls=controls,
        tiers=[] if args.no_tiers else None,
        plugins=[*base.plugins, *(p for p in plugins if p not in base.plugins)] if plugins else None,
    )


def cmd_run(args: argparse.Namespace) -> int:
    suite = run_suite(args)
    out = Path(args.out or Path("runs") / suite.name)
    if args.times_from and not args.dry_run:
        raise UserError("--times-from times a plan: it goes with --dry-run (nothing is run)")
    if args.dry_run:
        times_from = Path(args.times_from) if args.times_from else None
        return dry_run(suite, out, times_from, args.device, worker_count(args.workers, args.device))
    if args.launcher == "submitit":
        results = launch_array(args, suite, out)
        if results is None:
            return 0
        return finish(args, suite, out, results)
    workers = worker_count(args.workers, args.device)  # auto: several on a GPU
    try:
        with no_progress_bars(args.no_progress), LocalWorkers(args.argv, workers):
            results = run(suite, out, device=args.device, progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        why = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        sys.stderr.write(f"\n{why}: finished units are saved in {out}; run the same command to resume\n")
        return 143 if isinstance(exc, Terminated) else 130
    if results is None:  # a worker that is not worker 0
        return 0
    return finish(args, suite, out, results)


def finish(args: argparse.Namespace, suite: Suite, out: Path, results: pd.DataFrame) -> int:
    """After the run: the headline (and the report unless --no-report), where the files are, what was skipped."""
    if results.empty:
        sys.stderr.write("no (model, method) pair could be evaluated; see skipped.json\n")
        return 1
    if args.no_report:
        text = (
            to_text(headline(results), width=WIDTH, keys=1)
            + f"\nThe report: python -m bench report {out / 'results.csv'}"
        )
        written = ""
    else:
        text, tables, plots = report(out / "results.csv", progress=None if args.no_progress else say)
        written = f"report:   {out / 'report'} ({len(tables)} tables and {len(plots)} figures; the page: index.html)\n"
        for tier in map(tier_folder, suite.tiers):  # each tier's own report (the main one's card reads them too)
            if (out / tier / "results.csv").exists():
                report(out / tier / "results.csv", progress=None if args.no_progress else say)
                written += f"tier {tier}: {out / tier / 'report'} (its page: index.html)\n"
    sys.stdout.write(f"\nleaderboard ({suite.name}): the best method of each model on each metric\n{text}\n\n")
    sys.stdout.write(f"results:  {out / 'results.csv'} (per sample: samples.csv, curves: curves.csv)\n{written}")
    skipped = json.loads((out / "skipped.json").read_text())
    if skipped:
        sys.stdout.write(f"skipped {len(skipped)} unsupported (model, method) pairs: see {out / 'skipped.json'}\n")
    return 0


def launch_array(args: argparse.Namespace, suite: Suite, out: Path) -> pd.DataFrame | None:
    """``--launcher submitit``: submit the job array; with ``--wait``, wait for it and return the run's results."""
    asked = {f.name: getattr(args, f"slurm_{f.name}") for f in fields(SlurmSettings) if f.name != "tasks"}
    settings = SlurmSettings(tasks=args.tasks, **asked)
    path = Path(args.suite or "vision")
    jobs = submit(suite, out, settings, args.device, path.parent if path.suffix == ".toml" else None)
    sys.stdout.write(f"submitted {len(jobs)} workers of suite {suite.name} into {out}: job {jobs[0].job_id}\n")
    if not args.wait:
        sys.stdout.write(
            f"progress: python -m bench status {out}; when done: python -m bench report {out / 'results.csv'}\n"
        )
        return None
    wait_for(jobs, out, say=lambda line: sys.stdout.write(f"{line}\n"))
    return read_results(out / "results.csv")


def dry_run(suite: Suite, out: Path, times_from: Path | None = None, device: str = "cpu", workers: int = 1) -> int:
    """``run --dry-run``: the plan and its estimated cost (:mod:`faithbench.bench.estimate.dry_run`) on ``device``
    shared by ``workers``, printed; its time when ``times_from`` names a finished slice
    (:mod:`faithbench.bench.estimate.slice_time`)."""
    text = dry_run_text(
        suite, out, lambda table: to_text(table, width=WIDTH, keys=1), WIDTH, times_from, device, workers
    )
    sys.stdout.write(text)
    problems, weights, first = readiness([suite, *(load_suite(t) for t in suite.tiers)])
    for line in first:
        sys.stdout.write(f"{line}\n")
    stops = problems + weights
    if stops:
        sys.stdout.write(f"\nnot ready to run here ({len(stops)}; a real run stops before making {out}):\n")
        sys.stdout.write("".join(f"  {line}\n" for line in stops))
        if weights:
            sys.stdout.write("  (absent weights: online, the run downloads them first; offline, put them there)\n")
        return 1
    sys.stdout.write("checks before compute: settings, data and weights all in place\n")
    return 0
