"""Leaderboard statistics from a run's per-sample scores: paired tests, rank stability, metric agreement.

Every method of a (model, metric) table is scored on the same samples, so methods are compared
paired, on the samples both scored (a sample a method leaves undefined drops out of its pairs only).
Where samples come in clusters (the cells of one grid) the unit of every test and resample is
the cluster: its mean over the samples a method scored.

- **Tied-best** (Demšar 2006; Holm 1979): the best method by mean, and every method whose paired
  difference to it is not significant -- a two-sided Wilcoxon signed-rank test per pair, Holm-corrected
  over the table's pairs at ``alpha``.
- **Rank stability** (bootstrap over samples, Efron & Tibshirani 1993): on the samples every method
  scored, resample them ``n_boot`` times and rank the methods' means; P(rank 1) splits ties evenly,
  the rank interval is the 2.5-97.5 % percentile of each method's rank.
- **Metric agreement** (Kendall 1938): Kendall's tau-b between the method rankings two metrics give on
  the same model (each metric's direction applied, so tau = 1 means they agree on the order).
- **Skill score** (as forecast skill against a reference, Murphy 1988): ``(s - s_random) / (s_oracle -
  s_random)`` where the metric scores an ``oracle`` control, else the margin over ``random`` in the
  metric's direction; a method is flagged when a one-sided Wilcoxon test (Holm over the table) does not
  find it better than ``random`` on the paired samples.
- **Split-half reliability** (Spearman 1910; Brown 1910): split the samples at random into halves,
  Spearman correlation between the methods' means on the two halves, averaged over ``n_splits``
  splits, Spearman-Brown corrected ``2 r / (1 + r)`` to the full sample.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.bench.report.ranktests import kendall_tau_b, pair_signs, spearman_rows, wilcoxon_many, wilcoxon_p

__all__ = ["holm", "metric_agreement", "paired_tests", "rank_stability", "rerun_agreement", "skill_scores"]
__all__ += ["split_half", "wide_tables", "wilcoxon_p"]

TABLE = ["model", "metric"]


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1); NaN stays NaN."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def _wide(samples: pd.DataFrame) -> pd.DataFrame:
    """One (model, metric) table's per-sample scores: samples x methods, NaN where undefined. A method with no
    defined sample (a constant map under a rank correlation) has no score to rank and is left out. Samples of
    one cluster (``cluster_id``: the cells of one grid, not independent) count as one: their mean."""
    if "cluster_id" in samples and (samples["cluster_id"] != samples["sample_id"]).any():
        samples = (
            samples.groupby(["cluster_id", "method"], sort=False)["value"]
            .mean()
            .reset_index()
            .rename(columns={"cluster_id": "sample_id"})
        )
    # pivot_table(aggfunc="first") without its cost (~5 ms a table): the first defined value of each (sample, method)
    rows, ids = pd.factorize(samples["sample_id"], sort=True, use_na_sentinel=False)
    cols, methods = pd.factorize(samples["method"], sort=True, use_na_sentinel=False)
    values = samples["value"].to_numpy(dtype=float)
    defined = ~np.isnan(values)
    cells = rows[defined] * len(methods) + cols[defined]
    cells, first = np.unique(cells, return_index=True)
    grid = np.full((len(ids), len(methods)), np.nan)
    grid.flat[cells] = values[defined][first]
    keep = ~np.isnan(grid).all(0)
    index, columns = pd.Index(ids, name="sample_id"), pd.Index(methods[keep], name="method")
    # copy=False keeps the (samples, methods) C order pivot_table gives: column means sum in the same order
    return pd.DataFrame(np.ascontiguousarray(grid[:, keep]), index=index, columns=columns, copy=False)


def wide_tables(samples: pd.DataFrame) -> dict[tuple[str, str], pd.DataFrame]:
    """Every (model, metric) table of ``samples`` as :func:`_wide` gives it, in the order the samples list them
    (built once for all the statistics of a report)."""
    return {(model, metric): _wide(part) for (model, metric), part in samples.groupby(TABLE, sort=False)}


def _direction(results: pd.DataFrame) -> dict[tuple[str, str], float]:
    """+1 where higher is better, -1 where lower is, per (model, metric)."""
    rows = results.drop_duplicates(TABLE)
    return {
        (m, k): 1.0 if bool(h) else -1.0
        for m, k, h in zip(rows["model"], rows["metric"], rows["higher_is_better"], strict=True)
    }


def paired_tests(
    results: pd.DataFrame, samples: pd.DataFrame, alpha: float = 0.05, tables: dict | None = None
) -> pd.DataFrame:
    """Per (model, metric, method): the best method, the paired test against it, tied-best.

    Columns: ``best`` (this method has the best mean), ``n_paired`` (samples both scored),
    ``p_vs_best`` (Wilcoxon), ``p_holm``, ``tied_best`` (best, or not significantly worse at alpha
    after Holm), ``paired_subset`` (the pair used fewer samples than either method scored). ``tables``: the
    samples' :func:`wide_tables`, where the caller has them already.
    """
    sign = _direction(results)
    rows = []
    for (model, metric), wide in (wide_tables(samples) if tables is None else tables).items():
        means = wide.mean(skipna=True) * sign.get((model, metric), 1.0)
        if means.notna().sum() == 0:
            continue
        best = means.idxmax()
        others = [m for m in wide.columns if m != best]
        values = wide.to_numpy()
        defined = ~np.isnan(values)
        b, scored = wide.columns.get_loc(best), defined.sum(0)
        diffs, n_paired, subset = [], [], []
        for method in others:
            j = wide.columns.get_loc(method)
            both = defined[:, b] & defined[:, j]
            n = int(both.sum())
            diffs.append(values[both, b] - values[both, j])
            n_paired.append(n)
            subset.append(n < max(scored[b], scored[j]))
        pvals = wilcoxon_many(diffs)
        adjusted = holm(np.asarray(pvals, dtype=float))
        rows.append(
            dict(
                model=model,
                metric=metric,
                method=best,
                best=True,
                n_paired=int(wide[best].notna().sum()),
                p_vs_best=math.nan,
                p_holm=math.nan,
                tied_best=True,
                paired_subset=False,
            )
        )
        for method, p, q, n, sub in zip(others, pvals, adjusted, n_paired, subset, strict=True):
            tied = bool(np.isfinite(q) and q >= alpha)  # no paired sample: cannot be called tied
            rows.append(
                dict(
                    model=model,
                    metric=metric,
                    method=method,
                    best=False,
                    n_paired=n,
                    p_vs_best=p,
                    p_holm=q,
                    tied_best=tied,
                    paired_subset=sub,
                )
            )
    return pd.DataFrame(rows)


def _ranks(means: np.ndarray) -> np.ndarray:
    """Competition ranks (1 = best) of each row of (B, M) scores where higher is better; ties share the best rank."""
    return (means[:, None, :] > means[:, :, None]).sum(-1) + 1


def rank_stability(
    results: pd.DataFrame, samples: pd.DataFrame, n_boot: int = 1000, seed: int = 0, tables: dict | None = None
) -> pd.DataFrame:
    """Per (model, metric, method): P(rank 1) and the 95 % bootstrap rank interval, on the common samples."""
    sign = _direction(results)
    rng = np.random.default_rng(seed)
    rows = []
    for (model, metric), wide in (wide_tables(samples) if tables is None else tables).items():
        wide = wide.dropna()  # samples every method scored
        methods = list(wide.columns)
        values = wide.to_numpy(dtype=float).T * sign.get((model, metric), 1.0)  # (M, S), higher is better
        if values.shape[1] == 0:
            continue
        idx = rng.integers(0, values.shape[1], size=(n_boot, values.shape[1]))
        means = values[:, idx].mean(-1).T  # (B, M)
        ranks = _ranks(means)
        first = ranks == 1
        p_first = (first / first.sum(1, keepdims=True)).mean(0)  # a k-way tie for first counts 1/k each
        low = np.percentile(ranks, 2.5, axis=0, method="lower")
        high = np.percentile(ranks, 97.5, axis=0, method="higher")
        for i, method in enumerate(methods):
            rows.append(
                dict(
                    model=model,
                    metric=metric,
                    method=method,
                    n_common=values.shape[1],
                    p_rank1=float(p_first[i]),
                    rank_low=int(low[i]),
                    rank_high=int(high[i]),
                )
            )
    return pd.DataFrame(rows)


def metric_agreement(results: pd.DataFrame, min_methods: int = 3) -> pd.DataFrame:
    """Kendall's tau-b between the method rankings of every pair of metrics on each model.

    Columns ``model, metric_a, metric_b, tau, n_methods``; pairs with fewer than ``min_methods``
    methods both scored are left out (a tau over two methods is +-1 by construction)."""
    frame = results[np.isfinite(results["mean"])]
    rows = []
    for model, part in frame.groupby("model", sort=False):
        signed = part.assign(score=part["mean"] * np.where(part["higher_is_better"].astype(bool), 1.0, -1.0))
        wide = signed.pivot_table(index="method", columns="metric", values="score", aggfunc="first")
        names = list(dict.fromkeys(part["metric"]))  # the results' order (the registry's), not alphabetical
        values = wide[names].to_numpy(dtype=float)
        defined, signs = ~np.isnan(values), pair_signs(values)
        for i, a in enumerate(names):
            for k, b in enumerate(names[i + 1 :], start=i + 1):
                both = defined[:, i] & defined[:, k]
                if both.sum() < min_methods:
                    continue
                tau = kendall_tau_b(signs, i, k, both)  # NaN where a metric ties every method
                rows.append(dict(model=model, metric_a=a, metric_b=b, tau=tau, n_methods=int(both.sum())))
    return pd.DataFrame(rows, columns=["model", "metric_a", "metric_b", "tau", "n_methods"])


def split_half(samples: pd.DataFrame, n_splits: int = 100, seed: int = 0, tables: dict | None = None) -> pd.DataFrame:
    """Per (model, metric): Spearman-Brown corrected split-half reliability of the methods' means."""
    rng = np.random.default_rng(seed)
    rows = []
    for (model, metric), wide in (wide_tables(samples) if tables is None else tables).items():
        values = wide.dropna().to_numpy(dtype=float)  # (S, M)
        n, m = values.shape
        if n < 4 or m < 3:
            rows.append(dict(model=model, metric=metric, split_half=math.nan, n_common=n))
            continue
        perms = np.stack([rng.permutation(n) for _ in range(n_splits)])  # the draws of one split after another
        a, b = values[perms[:, : n // 2]].mean(1), values[perms[:, n // 2 :]].mean(1)
        rs = spearman_rows(a, b)
        r = float(np.nanmean(rs)) if np.isfinite(rs).any() else math.nan
        value = 2 * r / (1 + r) if r > -1 else -1.0  # Spearman-Brown, on the mean correlation over splits
        rows.append(dict(model=model, metric=metric, split_half=value, n_common=n))
    return pd.DataFrame(rows)


def skill_scores(
    results: pd.DataFrame,
    samples: pd.DataFrame,
    alpha: float = 0.05,
    random: str = "random",
    oracle: str = "oracle",
    tables: dict | None = None,
) -> pd.DataFrame:
    """Per (model, metric, method) with a ``random`` control: ``skill`` (oracle-scaled) or ``margin`` over random,
    ``p_vs_random`` (one-sided Wilcoxon, Holm-corrected over the table) and ``beats_random``."""
    sign = _direction(results)
    rows = []
    for (model, metric), wide in (wide_tables(samples) if tables is None else tables).items():
        if random not in wide.columns:
            continue
        d = sign.get((model, metric), 1.0)
        means = wide.mean(skipna=True)
        s_random = means[random]
        span = means[oracle] - s_random if oracle in wide.columns else math.nan
        others = [m for m in wide.columns if m != random]  # the oracle too: its skill is 1 by definition
        values = wide.to_numpy()
        defined = ~np.isnan(values)
        r = wide.columns.get_loc(random)
        diffs = []
        for method in others:
            j = wide.columns.get_loc(method)
            both = defined[:, j] & defined[:, r]
            diffs.append(d * (values[both, j] - values[both, r]))
        pvals = wilcoxon_many(diffs, alternative="greater")
        adjusted = holm(np.asarray(pvals, dtype=float))
        for method, p, q in zip(others, pvals, adjusted, strict=True):
            scaled = np.isfinite(span) and span != 0
            rows.append(
                dict(
                    model=model,
                    metric=metric,
                    method=method,
                    skill=(means[method] - s_random) / span if scaled else math.nan,
                    margin=d * (means[method] - s_random),
                    p_vs_random=p,
                    p_vs_random_holm=q,
                    beats_random=bool(np.isfinite(q) and q < alpha),
                )
            )
        rows.append(
            dict(
                model=model,
                metric=metric,
                method=random,
                skill=0.0 if np.isfinite(span) and span != 0 else math.nan,
                margin=0.0,
                p_vs_random=math.nan,
                p_vs_random_holm=math.nan,
                beats_random=False,
            )
        )
    return pd.DataFrame(rows)


def rerun_agreement(samples: pd.DataFrame) -> pd.DataFrame:
    """Per (model, metric, method, seed) of a seeded method run again (rows with a ``rerun_of``): the Spearman
    correlation of its per-sample scores with the first run's, over the samples both scored."""
    reruns = samples[samples["rerun_of"].notna()]
    rows = []
    for (model, metric, method, seed), part in reruns.groupby(
        ["model", "metric", "rerun_of", "rerun_seed"], sort=False
    ):
        first = samples[(samples["model"] == model) & (samples["metric"] == metric) & (samples["method"] == method)]
        both = first.merge(part, on="sample_id", suffixes=("", "_rerun"))[["value", "value_rerun"]].dropna()
        rho = math.nan
        if len(both) >= 3 and both["value"].nunique() > 1 and both["value_rerun"].nunique() > 1:
            rho = float(stats.spearmanr(both["value"], both["value_rerun"]).statistic)
        rows.append(dict(model=model, metric=metric, method=method, seed=int(seed), rerun_rho=rho, n=len(both)))
    return pd.DataFrame(rows, columns=["model", "metric", "method", "seed", "rerun_rho", "n"])
