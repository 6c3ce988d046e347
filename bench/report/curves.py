"""The curves behind the curve metrics (removal, erasure, the cascading sanity check), one figure per model: a panel
per metric, each method its own colour and marker, the controls as grey reference lines."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from faithbench.bench.report.order import is_control, method_order, model_order
from faithbench.bench.report.style import WIDTH_IN, better, line_style, save, side_legend
from faithbench.bench.store.run_catalog import current


class _Axes(NamedTuple):
    """A curve metric's panel: its name and its axes' labels, as the run recorded them."""

    name: str
    x: str = ""
    y: str = "p(explained class)"


COLUMNS = 3  # panels per row: three fit the report's width with their axis labels apart


def _mean_curves(curves: pd.DataFrame) -> pd.DataFrame:
    """Per model, metric, method and fraction: the mean over the samples and its 95 % normal interval half-width."""
    keys = ["model", "metric", "method", "fraction"]
    stats = curves.groupby(keys, sort=False)["value"].agg(["mean", "std", "count"]).reset_index()
    stats["half"] = 1.96 * stats["std"].fillna(0.0) / np.sqrt(stats["count"].clip(lower=1))
    return stats.sort_values(keys)


def _panel(ax: Any, stats: pd.DataFrame, spec: Any, row: pd.Series | None, methods: list[str]) -> None:
    for method in methods:
        line = stats[stats["method"] == method]
        if line.empty:
            continue
        style = line_style(method)
        ax.plot(line["fraction"], line["mean"], label=method.replace("_", " "), **style)
        if not is_control(method):  # the interval of a reference line would only add grey ink
            ax.fill_between(
                line["fraction"],
                line["mean"] - line["half"],
                line["mean"] + line["half"],
                color=style["color"],
                alpha=0.1,
                linewidth=0,
            )
    title = spec.name.replace("_", " ")
    if row is not None:  # the direction of the metric's score (the curve's area or summary), in its unit
        unit = f"{row['unit']}, " if isinstance(row["unit"], str) and row["unit"] else ""
        title += f" ({unit}{better(bool(row['higher_is_better']))})"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(spec.x or "fraction", fontsize=9)
    ax.set_ylabel(spec.y, fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3, linewidth=0.6)


def curve_jobs(curves: pd.DataFrame, results: pd.DataFrame, out: Path) -> list[Callable[[Any], Path]]:
    """One job per model with curves, in the report's order: given ``plt``, it draws and writes the model's
    ``curves_<model>.png`` (:func:`curve_figures`; the report draws the jobs side by side)."""
    metrics, models = set(curves["metric"].unique()), set(curves["model"].unique())  # once: curves has ~1e6 rows
    catalog = current()
    specs = [_Axes(m, **catalog.curves.get(m, {})) for m in catalog.metrics if m in metrics]
    if not specs:
        return []
    rows = results.drop_duplicates("metric").set_index("metric")
    means = _mean_curves(curves)
    order = [m for m in model_order(results) if m in models] + sorted(models - set(results["model"]))
    return [partial(_model_figure, model, means[means["model"] == model], specs, rows, out) for model in order]


def curve_figures(curves: pd.DataFrame, results: pd.DataFrame, out: Path, plt: Any) -> list[Path]:
    """``curves_<model>.png`` for every model with curves: its curve metrics side by side (registry order), the
    methods in the report's order and colours, the controls grey and dashed; shaded: 95 % interval of the mean."""
    return [job(plt) for job in curve_jobs(curves, results, out)]


def _model_figure(model: str, part: pd.DataFrame, specs: list, rows: pd.DataFrame, out: Path, plt: Any) -> Path:
    shown = [s for s in specs if (part["metric"] == s.name).any()]
    methods = method_order(part["method"])
    n_cols = min(COLUMNS, len(shown))
    n_rows = -(-len(shown) // n_cols)
    legend_in = 2.4  # the legend's column at the right
    panel_w = min(4.4, (WIDTH_IN - legend_in) / n_cols)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(panel_w * n_cols + legend_in, 3.3 * n_rows + 0.5), squeeze=False)
    for ax, spec in zip(axes.flat, shown, strict=False):
        row = rows.loc[spec.name] if spec.name in rows.index else None
        _panel(ax, part[part["metric"] == spec.name], spec, row, methods)
    for ax in list(axes.flat)[len(shown) :]:
        ax.set_visible(False)
    handles, labels = {}, []
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles:
                handles[label] = h
                labels.append(label)
    fig.suptitle(f"{model}: mean curves over the samples (grey dashed: controls)", fontsize=12, x=0.01, ha="left")
    side_legend(fig, [handles[label] for label in labels], labels, legend_in, h_pad=1.6, w_pad=1.4)
    return save(fig, out / f"curves_{model}.png", plt)
