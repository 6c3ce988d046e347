"""The report's statistics (:mod:`faithbench.bench.report.statistics`): leaderboard marks, their footnote, the
statistics files, the metric-agreement heatmap and the rank-interval plot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.agreement import agreement_statistics, effect_sizes, ranking_convergence
from faithbench.bench.report.order import method_colour, method_order
from faithbench.bench.report.protocols import protocol_marks
from faithbench.bench.report.statistics import (
    metric_agreement,
    paired_tests,
    rank_stability,
    rerun_agreement,
    skill_scores,
    split_half,
    wide_tables,
)
from faithbench.bench.report.style import WIDTH_IN, save
from faithbench.bench.store.results import contestants, first_runs, with_job_columns
from faithbench.errors import UserError

BEST, TIED = "★", "≈"


@dataclass
class LeaderboardStats:
    """Per (model, method, metric) marks; empty when the run has no per-sample scores."""

    table: pd.DataFrame  # model, metric, method, best, tied_best, p_vs_best, p_holm, n_paired, p_rank1, ranks
    agreement: pd.DataFrame  # model, metric_a, metric_b, tau, n_methods
    reliability: pd.DataFrame  # model, metric, split_half, n_common, alpha, mad_ratio (report.agreement)
    skill: pd.DataFrame  # model, metric, method, skill, margin, p_vs_random(_holm), beats_random
    reruns: pd.DataFrame  # model, metric, method, seed, rerun_rho, n
    alpha: float
    n_boot: int
    marks: dict[tuple[str, str, str], str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # footnote lines of extra marks (rankings across protocols)
    convergence: pd.DataFrame = field(default_factory=pd.DataFrame)  # model, metric, n, tau, tau_low, tau_high

    def suffix(self, model: str, method: str, metric: str) -> str:
        return self.marks.get((model, method, metric), "")

    def footnote(self) -> list[str]:
        if self.table.empty:
            return []
        lines = [
            f"{BEST} best mean of the model and metric among the methods (not the controls); {TIED} not "
            f"significantly worse than {BEST} (two-sided Wilcoxon signed-rank test on the paired samples, "
            f"Holm-corrected within each model x metric, alpha = {self.alpha}); P1 = bootstrap probability of "
            f"ranking first ({self.n_boot} resamples of the samples every method of the model scored)."
        ]
        subset = self.table[self.table["paired_subset"]]
        if not subset.empty:
            spans = subset.groupby(["model", "metric"], sort=False)["n_paired"].agg(["min", "max"])
            tables = ", ".join(
                f"{model}/{metric} (n = {lo}" + (f"-{hi})" if hi != lo else ")")
                for (model, metric), lo, hi in zip(spans.index, spans["min"], spans["max"], strict=True)
            )
            lines.append(
                f"Methods whose undefined samples differ are compared with {BEST} on their common samples: {tables}."
            )
        return lines + self.notes


SAMPLE_COLUMNS = ("model", "method", "metric", "sample_id", "value", "undefined")


def read_samples(run_dir: Path, results: pd.DataFrame | None = None) -> pd.DataFrame | None:
    """A run's ``samples.csv`` (None where the run has none); a file that does not parse, lacks a column or holds
    fewer samples of a row than ``results`` counts (cut short, or another run's) is a one-line error."""
    path = run_dir / "samples.csv"
    if not path.exists() or path.stat().st_size <= 1:
        return None
    rerun = "run the run's `bench run` command into its folder again to rewrite it from the units"
    try:
        samples = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path} is not a readable samples CSV ({type(exc).__name__}: {exc}); {rerun}") from None
    missing = [c for c in SAMPLE_COLUMNS if c not in samples.columns]
    if missing:
        raise UserError(f"{path} is not a faithbench samples file (missing column(s) {', '.join(missing)}); {rerun}")
    samples = with_job_columns(samples)
    if results is not None and "n" in results:
        held = samples.groupby(["model", "method", "metric"]).size()
        for r in results.itertuples():
            k = int(held.get((r.model, r.method, r.metric), 0))
            if k < r.n:
                raise UserError(
                    f"{path} holds {k} of the {r.n} samples of {r.model} / {r.method} / {r.metric} that results.csv "
                    f"counts (cut short, or from another run); {rerun}"
                )
    return samples.assign(value=samples["value"].where(~samples["undefined"].astype(bool)))


def leaderboard_stats(
    run_dir: Path, results: pd.DataFrame, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0
) -> LeaderboardStats:
    """Paired tests, rank stability, metric agreement and split-half reliability of a run (``results`` as
    :func:`~faithbench.bench.store.results.read_results` gives it: with its job columns)."""
    samples = read_samples(run_dir, results)
    reruns = rerun_agreement(samples) if samples is not None else pd.DataFrame()
    if samples is not None:  # a rerun with another seed is not a method of the leaderboard
        samples = first_runs(samples)
    results = first_runs(results)
    # The controls are the yardstick (skill), not contestants: the marks, ranks, agreement and reliability are
    # about the methods (an oracle would win every pointing game).
    methods = contestants(results)
    agreement = metric_agreement(methods)
    if samples is None:
        empty = pd.DataFrame()
        return LeaderboardStats(empty, agreement, empty, empty, empty, alpha, n_boot)
    skill = skill_scores(results, samples, alpha=alpha)
    samples = contestants(samples)
    tables = wide_tables(samples)  # the per-table pivots, built once for the three statistics below
    tests = paired_tests(methods, samples, alpha=alpha, tables=tables)
    ranks = rank_stability(methods, samples, n_boot=n_boot, seed=seed, tables=tables)
    key = ["model", "metric", "method"]
    table = tests.merge(ranks, on=key, how="left") if not ranks.empty else tests
    if not table.empty:
        table["cles_vs_best"] = effect_sizes(table, tables, results)
    reliability = split_half(samples, seed=seed, tables=tables)
    if not reliability.empty:
        reliability = reliability.merge(agreement_statistics(tables), on=["model", "metric"], how="left")
    stats = LeaderboardStats(table, agreement, reliability, skill, reruns, alpha, n_boot)
    stats.convergence = ranking_convergence(tables, seed=seed)
    for r in table.itertuples():
        if r.tied_best:
            p1 = getattr(r, "p_rank1", np.nan)
            stats.marks[(r.model, r.method, r.metric)] = (BEST if r.best else TIED) + (
                f" P1 {p1:.2f}" if np.isfinite(p1) else ""
            )
    extra, stats.notes = protocol_marks(run_dir, table, alpha)  # `bench rescore --sweep`: best under every protocol
    for key, mark in extra.items():  # after the key's ★ / ≈, before its P1
        head, _, p1 = stats.marks.get(key, "").partition(" P1 ")
        stats.marks[key] = f"{head} {mark}".strip() + (f" P1 {p1}" if p1 else "")
    return stats


def write_statistics(stats: LeaderboardStats, out: Path) -> list[Path]:
    """statistics.csv (per method), reliability.csv (per metric), metric_agreement.csv (per metric pair)."""
    paths = []
    for name, frame in (
        ("statistics", stats.table),
        ("reliability", stats.reliability),
        ("skill", stats.skill),
        ("rerun_agreement", stats.reruns),
        ("metric_agreement", stats.agreement),
        ("convergence", stats.convergence),
    ):
        if not frame.empty:
            path = out / f"{name}.csv"
            frame.to_csv(path, index=False)
            paths.append(path)
    return paths


def agreement_heatmap(stats: LeaderboardStats, out: Path, plt: Any, sns: Any) -> Path | None:
    """Kendall's tau between the metrics' method rankings, averaged over the models."""
    if stats.agreement.empty:
        return None
    mirrored = pd.concat(
        [stats.agreement, stats.agreement.rename(columns={"metric_a": "metric_b", "metric_b": "metric_a"})]
    )
    grid = mirrored.pivot_table(index="metric_a", columns="metric_b", values="tau", aggfunc="mean")
    order = list(dict.fromkeys([*stats.agreement["metric_a"], *stats.agreement["metric_b"]]))
    grid = grid.reindex(index=order, columns=order)
    for m in order:
        grid.loc[m, m] = 1.0
    fig, ax = plt.subplots(figsize=(1.1 * len(order) + 2, 0.9 * len(order) + 1.5))
    sns.heatmap(grid, vmin=-1, vmax=1, cmap="vlag", annot=True, fmt=".2f", square=True, ax=ax)
    ax.set_title(
        f"metric agreement: Kendall's tau of the method rankings (mean over {mirrored['model'].nunique()} models)"
    )
    ax.set_xlabel("")
    ax.set_ylabel("")
    return save(fig, out / "metric_agreement.png", plt)


def rank_interval_jobs(stats: LeaderboardStats, out: Path) -> list[Callable[[Any], Path]]:
    """One job per model, in the run's order: given ``plt``, it draws and writes ``rank_intervals_<model>.png``
    (:func:`rank_interval_plot`; the report draws the jobs side by side)."""
    if stats.table.empty or "rank_low" not in stats.table:
        return []
    table = stats.table.dropna(subset=["rank_low"])
    return [partial(_rank_intervals, model, part, out) for model, part in table.groupby("model", sort=False)]


def rank_interval_plot(stats: LeaderboardStats, out: Path, plt: Any, sns: Any) -> list[Path]:
    """``rank_intervals_<model>.png`` per model: a panel per metric, each method's 95 % bootstrap rank interval (bar,
    in the method's colour; the methods in the report's order on every panel) and P(rank 1)."""
    return [job(plt) for job in rank_interval_jobs(stats, out)]


def _rank_intervals(model: str, part: pd.DataFrame, out: Path, plt: Any) -> Path:
    metrics = list(dict.fromkeys(part["metric"]))
    methods = method_order(part["method"])
    n_cols = min(4, len(metrics))
    n_rows = -(-len(metrics) // n_cols)
    height = 0.2 * len(methods) + 1.0
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(min(WIDTH_IN, 3.4 * n_cols + 1.6), height * n_rows + 0.6),
        squeeze=False,
        sharey=True,
    )
    y = {m: i for i, m in enumerate(methods)}
    for ax, metric in zip(axes.flat, metrics, strict=False):
        rows = part[part["metric"] == metric]
        ys = [y[m] for m in rows["method"]]
        ax.hlines(
            ys,
            rows["rank_low"] - 0.3,
            rows["rank_high"] + 0.3,
            colors=list(map(method_colour, rows["method"])),
            linewidth=6,
        )
        n = len(methods)
        for r in rows.itertuples():  # P(rank 1) in a column right of the ranks, where it is not ~0
            mark = "★ " if r.best else "≈ " if r.tied_best else ""
            p1 = f"{r.p_rank1:.2f}" if np.isfinite(r.p_rank1) else ""
            if mark or r.p_rank1 >= 0.005:
                ax.text(n + 2.4, y[r.method], f"{mark}{p1}", va="center", ha="right", fontsize=7.5)
        ax.axvline(n + 0.7, color="#cccccc", linewidth=0.8)
        ax.set_xlim(0.4, n + 2.5)
        ax.set_xticks(range(1, n + 1, 1 if n <= 10 else 2))
        ax.set_title(metric.replace("_", " "), fontsize=9.5)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(labelsize=8)
    axes[0, 0].set_yticks(range(len(methods)), [m.replace("_", " ") for m in methods])
    axes[0, 0].invert_yaxis()
    for k, ax in enumerate(axes.flat):  # the lowest panel of each column
        if k < len(metrics) and k + n_cols >= len(metrics):
            ax.set_xlabel("rank (95 % bootstrap interval)", fontsize=8)
    for ax in list(axes.flat)[len(metrics) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{model}: 95 % bootstrap rank interval per metric (1 = best); right: P(rank 1) (blank: < 0.005), "
        "★ best, ≈ not significantly worse",
        fontsize=11,
        x=0.01,
        ha="left",
    )
    fig.tight_layout()
    return save(fig, out / f"rank_intervals_{model}.png", plt)


def reliability_text(stats: LeaderboardStats) -> pd.DataFrame:
    """Split-half reliability per model (rows) and metric (columns), for the report's tables."""
    if stats.reliability.empty:
        return pd.DataFrame()
    wide = stats.reliability.pivot_table(index="model", columns="metric", values="split_half", aggfunc="first")
    order = list(dict.fromkeys(stats.reliability["metric"]))
    return wide.reindex(columns=order).map(lambda v: "n/a" if not np.isfinite(v) else f"{v:.2f}").reset_index()


def skill_table(stats: LeaderboardStats) -> pd.DataFrame:
    """Per (model, method) row and metric column: the skill score (oracle-scaled, where the metric has an
    oracle) or the margin over ``random`` (``+`` signed, in the metric's unit and direction), ``✗`` where the
    method is not significantly better than ``random``."""
    if stats.skill.empty:
        return pd.DataFrame()

    def cell(r: pd.Series) -> str:
        value = f"{r.skill:.2f}" if np.isfinite(r.skill) else f"{r.margin:+.2f}" if np.isfinite(r.margin) else "n/a"
        return value + ("" if r.beats_random or r.method == "random" else " ✗")

    frame = stats.skill.assign(cell=stats.skill.apply(cell, axis=1))
    wide = frame.pivot_table(index=["model", "method"], columns="metric", values="cell", aggfunc="first")
    order = list(dict.fromkeys(stats.skill["metric"]))
    return wide.reindex(columns=order).fillna("–").reset_index()


SKILL_NOTE = (
    "Skill against the controls: (score - random) / (oracle - random) where the metric has an oracle (1: as good "
    "as the ground truth, 0: no better than noise), else the margin over random in the metric's unit (+: better). "
    "✗: not significantly better than random (one-sided Wilcoxon signed-rank, Holm within each model x metric)."
)
