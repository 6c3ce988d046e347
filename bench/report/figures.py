"""The report's figures, in the order a reader meets them: per metric a model x method heatmap of the scores, the
example maps, per model the curves behind the curve metrics and the rank intervals, the metric agreement and the
faithfulness-vs-cost plot. Every method keeps the colour :mod:`faithbench.bench.report.order` gives it; no figure
is wider or taller than :data:`faithbench.bench.report.style.MAX_PX` (figures of many models are split per model).

Drawing is most of a report's time, and each figure is drawn on its own: where the machine has more than one core
the figures are drawn side by side in forked worker processes (the same pixels, written by the workers)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import pandas as pd

from faithbench.bench.report.agreement import convergence_plot
from faithbench.bench.report.card import card_figure
from faithbench.bench.report.cost import cost_plot
from faithbench.bench.report.curves import curve_jobs
from faithbench.bench.report.heatmap import score_heatmap
from faithbench.bench.report.order import metric_order
from faithbench.bench.report.panel import example_panel
from faithbench.bench.report.statistics_section import LeaderboardStats, agreement_heatmap, rank_interval_jobs
from faithbench.bench.store.results import first_runs, with_job_columns

Drawn = Path | list[Path] | None
Job = tuple[str, int, Callable[[], Drawn]]  # progress line, rough cost (slow ones first; 0: here), draw and write
_JOBS: list[Job] = []  # what the forked workers draw: inherited by fork, never pickled (frames, closures, plt)


def write_plots(
    run_dir: Path,
    results: pd.DataFrame,
    out: Path,
    stats: LeaderboardStats | None = None,
    progress: Callable[[str], None] | None = None,
    card: pd.DataFrame | None = None,
    workers: int | None = None,
) -> list[Path]:
    """Write the report's figures into ``out`` and return them in reading order: ``<metric>.png`` per metric,
    ``example_maps.png``, ``curves_<model>.png``, with ``stats`` ``rank_intervals_<model>.png`` and
    ``metric_agreement.png`` and ``ranking_convergence.png``, with ``card`` ``report_card.png``,
    then ``faithfulness_vs_cost.png``. ``progress`` is told each kind of figure (drawn one after another: as it
    starts; side by side: as it is done). ``workers``: processes drawing (default: one per core; 1: this one)."""
    say = progress or (lambda _: None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    out.mkdir(parents=True, exist_ok=True)
    results = first_runs(results)
    jobs: list[Job] = []
    for metric in metric_order(results["metric"]):
        jobs.append((f"report: figure {metric}", 1, lambda m=metric: score_heatmap(results, m, out, plt, stats)))
    jobs.append(("report: figure example maps", 0, lambda: example_panel(run_dir, results, out, plt)))
    curves = _read_optional(run_dir / "curves.csv")
    if curves is not None:
        label = "report: figure curves per model"
        jobs += [(label, 4, partial(job, plt)) for job in curve_jobs(first_runs(curves), results, out)]
    if stats is not None:
        label = "report: figure rank intervals per model"
        jobs += [(label, 3, partial(job, plt)) for job in rank_interval_jobs(stats, out)]
        jobs.append(("report: figure metric agreement", 1, lambda: agreement_heatmap(stats, out, plt, sns)))
        jobs.append(("report: figure ranking convergence", 1, lambda: convergence_plot(stats.convergence, out, plt)))
    if card is not None:
        jobs.append(("report: figure report card", 1, lambda: card_figure(card, out, plt)))
    if "explain_time_s" in results:
        jobs.append(("report: figure faithfulness vs cost", 3, lambda: cost_plot(results, out, plt)))
    written: list[Path] = []
    for drawn in _draw(jobs, say, workers):
        written += drawn if isinstance(drawn, list) else [drawn] if drawn is not None else []
    return written


def _draw(jobs: list[Job], say: Callable[[str], None], workers: int | None) -> list[Drawn]:
    """Every job's figures, in the jobs' order: drawn here, or by ``workers`` forked processes (the slow ones
    dispatched first) where there is more than one core on Linux. Jobs of cost 0 are drawn here
    meanwhile (the example maps: torch tensors, which a fork of a process that ran torch's thread pool should not
    touch)."""
    n = min(workers or _cores(), len(jobs))
    said = None
    if n < 2 or sys.platform != "linux":  # fork is safe on Linux; macOS' system frameworks may not survive it
        drawn = []
        for label, _, draw in jobs:
            if label != said:
                say(said := label)
            drawn.append(draw())
        return drawn
    order = sorted((i for i, job in enumerate(jobs) if job[1] > 0), key=lambda i: -jobs[i][1])
    done: dict[int, Drawn] = {}
    _JOBS[:] = jobs  # before the pool forks its workers (all at once, on the first submit)
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
    try:
        with warnings.catch_warnings():  # Python 3.12+ on fork beside torch's threads: the workers never use torch
            warnings.filterwarnings("ignore", r".*multi-threaded, use of fork\(\)", DeprecationWarning)
            futures = {i: pool.submit(_draw_one, i) for i in order}
        for i, (label, cost, draw) in enumerate(jobs):
            if cost == 0:
                say(label)
                done[i] = draw()
        for i in order:
            done[i] = futures[i].result()
            if jobs[i][0] != said:
                say(said := jobs[i][0])
    finally:
        pool.shutdown(cancel_futures=True)  # a failed figure: the others not yet started are not drawn
        _JOBS.clear()
    return [done[i] for i in range(len(jobs))]


def _draw_one(index: int) -> Drawn:
    return _JOBS[index][2]()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _read_optional(path: Path) -> pd.DataFrame | None:
    return with_job_columns(pd.read_csv(path)) if path.exists() and path.stat().st_size > 1 else None
