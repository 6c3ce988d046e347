"""Can a metric tell the methods apart, and do its samples agree on their order? The agreement statistics that
metric papers publish (AttriBench, Gevaert et al.), per (model, metric) table of per-sample scores (samples x
methods, the samples where every method is defined):

- **Krippendorff's alpha** (ordinal) of the per-sample method ranks: each sample a coder that ranks the methods
  (the ``krippendorff`` package). 1: every sample orders the methods alike; 0: no more agreement than chance.
- **MAD ratio**: the median absolute deviation of all scores from their median over the mean of each method's own
  MAD, ``median_ij |v_ij - med(v)| / mean_j median_i |v_ij - med_i(v_ij)|``. A non-parametric one-way ANOVA: about
  1 where the methods behave alike, larger where the metric separates them.
- **CLES** (common-language effect size) of each comparison the leaderboard marks: P(the best method scores better
  than the other on the same sample), ties counting 1/2, in the metric's direction.
"""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pandas as pd
from scipy.stats import rankdata


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
