"""The leaderboard and the headline: one row per (model, method), each model's methods best first by the table's
first metric, then its controls (the yardstick, in a fixed order)."""

from __future__ import annotations

import math

import pandas as pd

from faithbench.bench.report.order import is_control, method_order, metric_order, model_order
from faithbench.bench.report.statistics_section import BEST, TIED, LeaderboardStats
from faithbench.bench.store.results import contestants, first_runs


def _cell(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    half = (high - low) / 2 if math.isfinite(high) and math.isfinite(low) else 0.0
    return f"{mean:.2f} ± {half:.2f}"


def metric_head(results: pd.DataFrame, metric: str) -> str:
    """``name ↑ [unit]``: the metric with its direction (↑ higher is better, ↓ lower) and unit."""
    row = results[results["metric"] == metric].iloc[0]
    unit = row.get("unit", "")
    arrow = "↑" if bool(row["higher_is_better"]) else "↓"
    return f"{metric} {arrow}" + (f" [{unit}]" if isinstance(unit, str) and unit else "")


def row_order(results: pd.DataFrame) -> list[tuple[str, str]]:
    """Every (model, method) of the run: models in the run's order; within a model its methods by their score on
    the first metric (best first, undefined last, ties in the registry's order), then the controls."""
    results = first_runs(results)
    first = results[results["metric"] == metric_order(results["metric"])[0]]
    order = []
    for model in model_order(results):
        names = method_order(results.loc[results["model"] == model, "method"])
        scored = first[first["model"] == model]
        up = bool(scored["higher_is_better"].iloc[0]) if len(scored) else True
        means = dict(zip(scored["method"], scored["mean"], strict=True))
        rank = {m: -v if up else v for m, v in means.items() if isinstance(v, float) and math.isfinite(v)}
        methods = sorted((m for m in names if not is_control(m)), key=lambda m: rank.get(m, math.inf))
        order += [(model, m) for m in methods + [m for m in names if is_control(m)]]
    return order


def sort_rows(table: pd.DataFrame, order: list[tuple[str, str]]) -> pd.DataFrame:
    """A table with ``model`` and ``method`` columns in ``order`` (rows it does not name last)."""
    position = {pair: i for i, pair in enumerate(order)}
    keys = [position.get(pair, len(position)) for pair in zip(table["model"], table["method"], strict=True)]
    return table.assign(_order=keys).sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)


def leaderboard(results: pd.DataFrame, stats: LeaderboardStats | None = None) -> pd.DataFrame:
    """One row per (model, method) in :func:`row_order`, one column per metric: ``mean ± 95% CI half-width``.

    Column names carry the direction (↑ higher is better, ↓ lower is better) and unit; with ``stats``,
    the best and tied-best cells of each model and metric carry their marks and P(rank 1).
    """
    results = first_runs(results)  # reruns: statistics only
    metrics = metric_order(results["metric"])
    cells = [
        _cell(mean, low, high) + (f" {stats.suffix(model, method, metric)}" if stats else "").rstrip()
        for mean, low, high, model, method, metric in zip(
            results["mean"], results["ci_low"], results["ci_high"], results["model"], results["method"],
            results["metric"], strict=True,
        )
    ]  # fmt: skip
    pivot = results.assign(cell=cells).pivot_table(
        index=["model", "method"], columns="metric", values="cell", aggfunc="first"
    )
    pivot = pivot.reindex(columns=metrics).fillna("–").rename(columns={m: metric_head(results, m) for m in metrics})
    pivot.columns.name = None
    return sort_rows(pivot.reset_index(), row_order(results))


def headline(results: pd.DataFrame, stats: LeaderboardStats | None = None) -> pd.DataFrame:
    """One row per model, one column per metric: the best method and its mean, ``(+k ≈)`` when k more methods are
    not significantly worse (with ``stats``; without, the best mean alone). Controls never head a column."""
    results = contestants(results)
    metrics = metric_order(results["metric"]) if not results.empty else []
    marks = stats.marks if stats else {}
    rows = []
    for model in model_order(results):
        row = {"model": model}
        for metric in metrics:
            part = results[(results["model"] == model) & (results["metric"] == metric)].dropna(subset=["mean"])
            row[metric] = _best_cell(part, {m: marks.get((model, m, metric), "") for m in part["method"]})
        rows.append(row)
    table = pd.DataFrame(rows, columns=["model", *metrics])
    return table.rename(columns={m: metric_head(results, m) for m in metrics})


def _best_cell(part: pd.DataFrame, marks: dict[str, str]) -> str:
    """``method mean (+k ≈)`` of one model and metric: the ★ method, or without marks the best mean."""
    if part.empty:
        return "–"
    starred = [m for m, mark in marks.items() if mark.startswith(BEST)]
    up = bool(part["higher_is_better"].iloc[0])
    best = part.loc[part["mean"].idxmax() if up else part["mean"].idxmin()]
    if starred:
        best = part[part["method"] == starred[0]].iloc[0]
    tied = sum(mark.startswith(TIED) for mark in marks.values())
    return f"{best['method']} {best['mean']:.2f}" + (f" (+{tied} {TIED})" if tied else "")
