"""Can a metric tell the methods apart, and do its samples agree on their order? The agreement statistics that
metric papers publish (AttriBench, Gevaert et al.), per (model, metric) table of per-sample scores (samples x
methods, the samples where every method is defined):

- **Krippendorff's alpha** (ordinal) of the per-sample method ranks: each sample a coder that ranks the methods
  (the ``krippendorff`` package). 1: every sample orders the methods alike; 0: no more agreement than chance.
- **MAD ratio**: the median absolute deviation of all scores from their median over the mean of each method's own
  MAD, ``median_ij |v_ij - med(v)| / mean_j median_i |v_ij - med_i(v_ij)|``. A non-parametric one-way ANOVA: about
  1 where the methods behave alike, larger where the metric separates them.
- **Convergence** of the ranking: for sample counts n up to the run's, Kendall's tau-b between the methods' means
  on n samples drawn without replacement and their means on every sample (median and 5-95 % band over the draws).
  Where tau stays near 1 well before the run's count, more samples would not change the order.
- **CLES** (common-language effect size) of each comparison the leaderboard marks: P(the best method scores better
  than the other on the same sample), ties counting 1/2, in the metric's direction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pandas as pd
from scipy.stats import rankdata

from faithbench.bench.report.style import save


def ordinal_alpha(values: np.ndarray) -> float:
    """Krippendorff's ordinal alpha of the rows' ranks of ``values`` (samples x methods); NaN with fewer than two
    samples or methods, or where every sample ranks every method alike at one rank (no variation to agree on)."""
    if values.shape[0] < 2 or values.shape[1] < 2:
        return math.nan
    ranks = rankdata(values, axis=1)
    if np.all(ranks == ranks[0, 0]):
        return math.nan
    return float(krippendorff.alpha(reliability_data=ranks, level_of_measurement="ordinal"))


def mad_ratio(values: np.ndarray) -> float:
    """MAD of all scores around their median over the mean of the methods' MADs (samples x methods); NaN where no
    method varies."""
    if values.size == 0:
        return math.nan
    within = np.median(np.abs(values - np.median(values, axis=0)), axis=0).mean()
    between = np.median(np.abs(values - np.median(values)))
    return float(between / within) if within > 0 else math.nan


def cles(best: np.ndarray, other: np.ndarray, direction: float) -> float:
    """P(``best`` scores better than ``other`` on a sample), ties 1/2; ``direction`` +1 where higher is better."""
    keep = np.isfinite(best) & np.isfinite(other)
    if not keep.any():
        return math.nan
    diff = direction * (best[keep] - other[keep])
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / keep.sum())


def agreement_statistics(tables: dict[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """Per (model, metric) table (:func:`~faithbench.bench.report.statistics.wide_tables`): Krippendorff's alpha and
    the MAD ratio over the samples where every method is defined (``n_common``)."""
    rows = []
    for (model, metric), wide in tables.items():
        values = wide.dropna().to_numpy(dtype=float)
        rows.append(dict(model=model, metric=metric, alpha=ordinal_alpha(values), mad_ratio=mad_ratio(values)))
    return pd.DataFrame(rows, columns=["model", "metric", "alpha", "mad_ratio"])


def effect_sizes(tests: pd.DataFrame, tables: dict[tuple[str, str], pd.DataFrame], results: pd.DataFrame) -> pd.Series:
    """The CLES of each row of the paired tests (a method against its table's best; NaN on the best's own row),
    aligned with ``tests``; the direction from ``results``' ``higher_is_better``."""
    rows = results.drop_duplicates(["model", "metric"])
    higher = zip(rows["model"], rows["metric"], rows["higher_is_better"], strict=True)
    sign = {(m, k): 1.0 if bool(h) else -1.0 for m, k, h in higher}
    best_of = {(r.model, r.metric): r.method for r in tests.itertuples() if r.best}
    out = []
    for r in tests.itertuples():
        wide, best = tables.get((r.model, r.metric)), best_of.get((r.model, r.metric))
        if r.best or wide is None or r.method not in wide or best not in wide:
            out.append(math.nan)
            continue
        out.append(cles(wide[best].to_numpy(float), wide[r.method].to_numpy(float), sign[(r.model, r.metric)]))
    return pd.Series(out, index=tests.index, dtype=float)


def _tau_b(sub: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``sub`` (draws x methods) with ``full`` (methods,), vectorised over the draws."""
    i, j = np.triu_indices(full.shape[0], k=1)
    a, b = np.sign(sub[:, i] - sub[:, j]), np.sign(full[i] - full[j])
    untied = np.sqrt((a != 0).sum(axis=1) * float((b != 0).sum()))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(untied > 0, (a * b).sum(axis=1) / untied, np.nan)


def ranking_convergence(
    tables: dict[tuple[str, str], pd.DataFrame], *, steps: int = 8, draws: int = 200, seed: int = 0
) -> pd.DataFrame:
    """Per (model, metric) table with at least 3 methods and 4 common samples: at ``steps`` sample counts n from 2
    to all (geometric), Kendall's tau-b of the methods' means on ``draws`` subsets of n samples (without
    replacement) against their means on every sample: its median and 5 / 95 % quantiles."""
    rng = np.random.default_rng(seed)
    rows = []
    for (model, metric), wide in tables.items():
        values = wide.dropna().to_numpy(dtype=float)
        n_all, n_methods = values.shape
        if n_methods < 3 or n_all < 4:
            continue
        full = values.mean(axis=0)
        for n in np.unique(np.geomspace(2, n_all, steps).round().astype(int)):
            pick = np.argsort(rng.random((draws, n_all)), axis=1)[:, :n]  # draws subsets without replacement
            tau = _tau_b(values[pick].mean(axis=1), full)
            low, mid, high = np.nanquantile(tau, [0.05, 0.5, 0.95]) if np.isfinite(tau).any() else [np.nan] * 3
            rows.append(dict(model=model, metric=metric, n=int(n), tau=mid, tau_low=low, tau_high=high))
    return pd.DataFrame(rows, columns=["model", "metric", "n", "tau", "tau_low", "tau_high"])


def convergence_plot(convergence: pd.DataFrame, out: Path, plt: Any) -> Path | None:
    """``ranking_convergence.png``: per model, each metric's median tau-b against n (the 5-95 % bands are in
    ``convergence.csv``)."""
    if convergence.empty:
        return None
    models = list(dict.fromkeys(convergence["model"]))
    metrics = list(dict.fromkeys(convergence["metric"]))
    colours = dict(zip(metrics, plt.get_cmap("tab20").colors * 2, strict=False))
    cols = min(3, len(models))
    rows = -(-len(models) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False, sharey=True)
    for ax, model in zip(axes.flat, models, strict=False):
        part = convergence[convergence["model"] == model]
        for metric, line in part.groupby("metric", sort=False):
            style = "--" if metrics.index(metric) >= 10 else "-"
            ax.plot(line["n"], line["tau"], style, marker="o", ms=3, color=colours[metric], label=metric)
        ns = sorted(part["n"].unique())
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=7)
        ax.set_title(model, fontsize=10)
        ax.axhline(1.0, color="grey", lw=0.6)
    for ax in axes.flat[len(models) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("samples")
    for ax in axes[:, 0]:
        ax.set_ylabel("Kendall tau-b")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.suptitle("convergence of the method ranking: tau-b with the ranking on every sample (median of 200 draws)")
    fig.tight_layout()
    return save(fig, out / "ranking_convergence.png", plt)


def agreement_text(reliability: pd.DataFrame) -> pd.DataFrame:
    """Per model (rows) and metric (columns): "alpha / MAD ratio", for the report's tables."""
    if reliability.empty or "alpha" not in reliability:
        return pd.DataFrame()

    def show(v: float) -> str:
        return "n/a" if not np.isfinite(v) else f"{v:.2f}"

    cells = reliability.assign(
        cell=[f"{show(a)} / {show(m)}" for a, m in zip(reliability["alpha"], reliability["mad_ratio"], strict=True)]
    )
    wide = cells.pivot_table(index="model", columns="metric", values="cell", aggfunc="first")
    return wide.reindex(columns=list(dict.fromkeys(reliability["metric"]))).fillna("–").reset_index()


AGREEMENT_NOTE = (
    "How the samples agree on the methods' order, and whether the metric separates the methods at all (as AttriBench "
    "reports): Krippendorff's ordinal alpha of the per-sample method ranks (1: every sample orders the methods "
    "alike, 0: chance) / the MAD ratio (spread of all scores over the methods' own spread: about 1 where the methods "
    "behave alike). Over the samples every method scored; n/a with fewer than 2 methods or samples. statistics.csv "
    "gives each method's CLES against its table's best (P(the best scores better on a sample), ties 1/2)."
)
