"""The report's figures: per metric the plot its spec asks for, the cost plot, the example panel and the
statistics' figures (every method in the colour :mod:`faithbench.bench.report.order` gives it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from faithbench.bench.report.cost import cost_plot
from faithbench.bench.report.panel import example_panel
from faithbench.bench.report.stats import LeaderboardStats, agreement_heatmap, rank_interval_plot
from faithbench.bench.run.results import first_runs, with_job_columns
from faithbench.metrics.registry import METRICS


def write_plots(
    run_dir: Path,
    results: pd.DataFrame,
    out: Path,
    stats: LeaderboardStats | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Per metric, the plot its spec asks for (``curve``: mean curve per method and model; ``bar``:
    per-sample scores by method and model), the example panel and, with ``stats``, the metric-agreement
    heatmap and the rank-interval plot. ``progress`` is told each figure as it starts."""
    say = progress or (lambda _: None)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    specs = [METRICS.get(m) for m in METRICS if m in set(results["metric"])]
    curves, samples = (_methods_only(_read_optional(run_dir / f"{n}.csv")) for n in ("curves", "samples"))
    for spec in specs:
        say(f"report: figure {spec.name}")
        if spec.plot == "curve" and curves is not None:
            part = curves[curves["metric"] == spec.name]
            if part.empty:
                continue
            grid = sns.relplot(
                data=part,
                x="fraction",
                y="value",
                hue="method",
                col="model",
                kind="line",
                errorbar=("se", 1.96),
                col_wrap=min(3, part["model"].nunique()),
                height=3.2,
            )
            grid.set_axis_labels(spec.curve_label, spec.curve_value_label)
            grid.figure.suptitle(spec.name.replace("_", " "), y=1.02)
            path = out / f"{spec.name}_curves.png"
            grid.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(grid.figure)
            written.append(path)
        elif spec.plot == "bar" and samples is not None:
            part = samples[samples["metric"] == spec.name]
            if part.empty:
                continue
            fig, ax = plt.subplots(figsize=(max(6, 0.9 * part["method"].nunique() * part["model"].nunique() / 2), 4))
            sns.barplot(data=part, x="method", y="value", hue="model", errorbar=("se", 1.96), ax=ax)
            ax.set_ylabel(f"{spec.name} [{spec.unit}]" if spec.unit else spec.name)
            ax.tick_params(axis="x", rotation=30)
            path = out / f"{spec.name}.png"
            fig.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(fig)
            written.append(path)
    if "explain_time_s" in results:
        cost = cost_plot(results, out, plt, sns)
        if cost is not None:
            written.append(cost)
    panel = example_panel(run_dir, results, out, plt)
    if panel is not None:
        written.append(panel)
    if stats is not None:
        written += [p for p in (agreement_heatmap(stats, out, plt, sns), rank_interval_plot(stats, out, plt, sns)) if p]
    return written


def _methods_only(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """Without the reruns of seeded methods (``lime@seed1``): they feed the rerun agreement, not the plots."""
    return None if frame is None else first_runs(frame)


def _read_optional(path: Path) -> pd.DataFrame | None:
    return with_job_columns(pd.read_csv(path)) if path.exists() and path.stat().st_size > 1 else None
