"""The report's figures, in the order a reader meets them: per metric a model x method heatmap of the scores, the
example maps, per model the curves behind the curve metrics and the rank intervals, the metric agreement and the
faithfulness-vs-cost plot. Every method keeps the colour :mod:`faithbench.bench.report.order` gives it; no figure
is wider or taller than :data:`faithbench.bench.report.style.MAX_PX` (figures of many models are split per model)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from faithbench.bench.report.card import card_figure
from faithbench.bench.report.cost import cost_plot
from faithbench.bench.report.curves import curve_figures
from faithbench.bench.report.heatmap import score_heatmap
from faithbench.bench.report.order import metric_order
from faithbench.bench.report.panel import example_panel
from faithbench.bench.report.stats import LeaderboardStats, agreement_heatmap, rank_interval_plot
from faithbench.bench.run.results import first_runs, with_job_columns


def write_plots(
    run_dir: Path,
    results: pd.DataFrame,
    out: Path,
    stats: LeaderboardStats | None = None,
    progress: Callable[[str], None] | None = None,
    card: pd.DataFrame | None = None,
) -> list[Path]:
    """Write the report's figures into ``out`` and return them in reading order: ``<metric>.png`` per metric,
    ``example_maps.png``, ``curves_<model>.png``, with ``stats`` ``rank_intervals_<model>.png`` and
    ``metric_agreement.png``, with ``card`` ``report_card.png``,
    then ``faithfulness_vs_cost.png``. ``progress`` is told each figure as it starts."""
    say = progress or (lambda _: None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    out.mkdir(parents=True, exist_ok=True)
    results = first_runs(results)
    written: list[Path | None] = []
    for metric in metric_order(results["metric"]):
        say(f"report: figure {metric}")
        written.append(score_heatmap(results, metric, out, plt, stats))
    say("report: figure example maps")
    written.append(example_panel(run_dir, results, out, plt))
    curves = _read_optional(run_dir / "curves.csv")
    if curves is not None:
        say("report: figure curves per model")
        written += curve_figures(first_runs(curves), results, out, plt)
    if stats is not None:
        say("report: figure rank intervals per model")
        written += rank_interval_plot(stats, out, plt, sns)
        say("report: figure metric agreement")
        written.append(agreement_heatmap(stats, out, plt, sns))
    if card is not None:
        say("report: figure report card")
        written.append(card_figure(card, out, plt))
    if "explain_time_s" in results:
        say("report: figure faithfulness vs cost")
        written.append(cost_plot(results, out, plt))
    return [p for p in written if p is not None]


def _read_optional(path: Path) -> pd.DataFrame | None:
    return with_job_columns(pd.read_csv(path)) if path.exists() and path.stat().st_size > 1 else None
