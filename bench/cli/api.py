"""Python in a few lines, on a par with the command line: score your own models and methods without a suite file.

    results = benchmark(["my_resnet18"], methods=["gradient", "integrated_gradients"], metrics=[...],
                        dataset="mnist-224", n_samples=16, report=True)
    print(leaderboard(results, statistics(results)))  # the marks of the paired tests, as the report's
    per_sample = samples(results)

``benchmark`` builds the suite from its arguments (validated like a suite file: every name, key and value), runs
it with the runner (resumable in ``out``) and returns the results table; its run folder (``results.attrs["run_dir"]``)
holds the per-sample scores that :func:`statistics` and :func:`samples` read. A folder of its own (no ``out``) is
removed when the Python process ends. This room is the front ends': the command line and this API.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.report.build import report as write_report
from faithbench.bench.report.statistics_section import LeaderboardStats, leaderboard_stats, read_samples
from faithbench.bench.run.question import question
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite
from faithbench.bench.store.results import read_results
from faithbench.errors import UserError
from faithbench.models.adapter import ModelAdapter

_TEMPORARY: list[Path] = []  # benchmark()'s own run folders, removed when the process ends


@atexit.register
def _remove_temporary() -> None:
    for folder in _TEMPORARY:
        shutil.rmtree(folder, ignore_errors=True)


def benchmark(
    models: Sequence[str | ModelAdapter],
    methods: Sequence[str],
    metrics: Sequence[str],
    *,
    dataset: str | None = None,
    out: str | Path | None = None,
    device: str = "auto",
    progress: bool = False,
    controls: bool | Sequence[str] = False,
    tiers: Sequence[str] = (),
    report: bool = False,
    name: str = "benchmark",
    **settings: Any,
) -> pd.DataFrame:
    """Run ``models`` x ``methods`` x ``metrics`` on ``dataset`` and return the results (one row per model,
    method and metric: mean, interval, counts, provenance). ``models``: registered names or adapters from
    :func:`faithbench.wrap_model`. ``dataset``: default the one the models were trained for (the zoo's), else
    ``mnist``. ``settings``: any other suite key (``n_samples``, ``seed``, ``batch_size``, ``data_root``,
    ``method_params``, a metric's settings table by its name). ``out``: the run folder (default: a new temporary
    folder); running again into the same folder resumes. ``controls``: the control explainers (``True``: all),
    ``tiers``: suites run after this one into ``out/NAME`` (``["truth"]``: the ground-truth tier); both off by
    default, as in a suite file and on the command line without ``--suite``: the same question gets the same
    numbers from all three (:mod:`faithbench.bench.run.question`). ``report``: write the report (tables, figures,
    the page) into ``out/report`` (``results.attrs["report"]``). A (model, method) pair the method cannot explain
    is named in a warning and in ``results.attrs["skipped"]``."""
    names = [m.name if isinstance(m, ModelAdapter) else m for m in models]
    data = question(names, methods, metrics, dataset=dataset, name=name, controls=controls, tiers=tiers, **settings)
    suite = build_suite(data, "benchmark()")
    if out is None:
        _TEMPORARY.append(Path(tempfile.mkdtemp(prefix="faithbench-")))
    folder = Path(out) if out is not None else _TEMPORARY[-1]
    results = run(suite, folder, device=device, progress=progress)
    results.attrs["run_dir"] = str(folder)
    skipped = json.loads((folder / "skipped.json").read_text()) if (folder / "skipped.json").exists() else []
    results.attrs["skipped"] = skipped  # [{"model", "method", "reason"}]
    if skipped:
        listed = "; ".join(f"{s['method']} on {s['model']}: {s['reason']}" for s in skipped)
        warnings.warn(f"{len(skipped)} (model, method) pair(s) could not run: {listed}", UserWarning, stacklevel=2)
    if report:
        results.attrs["report"] = str(write_report(folder / "results.csv")[1]["html"].parent)
    return results


def _run_dir(results: pd.DataFrame | str | Path) -> Path:
    folder = Path(results) if isinstance(results, str | Path) else results.attrs.get("run_dir")
    if folder is None or not (Path(folder) / "results.csv").exists():
        raise UserError("no run folder: pass what benchmark() returned, or a run folder (its --out)")
    return Path(folder)


def statistics(results: pd.DataFrame | str | Path, *, alpha: float = 0.05, n_boot: int = 1000) -> LeaderboardStats:
    """The paired tests, rank intervals, skill, agreement and reliability of a run, as its report has them:
    ``leaderboard(results, statistics(results))`` marks the best and tied-best methods. ``results``: what
    :func:`benchmark` returned, or a run folder."""
    folder = _run_dir(results)
    return leaderboard_stats(folder, read_results(folder / "results.csv"), alpha=alpha, n_boot=n_boot)


def samples(results: pd.DataFrame | str | Path) -> pd.DataFrame:
    """The per-sample table of a run (one row per model, method, metric and sample; undefined scores NaN)."""
    table = read_samples(_run_dir(results))
    return table if table is not None else pd.DataFrame()
