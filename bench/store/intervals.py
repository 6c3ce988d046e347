"""The confidence interval of a result row's mean: per sample, or by cluster where samples come in clusters."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def summarise(values: np.ndarray, clusters: np.ndarray | None = None) -> dict[str, float]:
    """Mean, std and n of the finite values, and a 95 % Student-t confidence interval of the mean.

    With ``clusters`` (a cluster id per value: the grid of a grid cell, whose cells are not independent)
    the interval is cluster-robust: ``mean +- t(G - 1) sqrt(G / (G - 1) sum_g (sum_{i in g} (y_i - mean))^2) / n``
    over the G clusters with a finite value (Cameron & Miller 2015); otherwise ``mean +- t(n - 1) std / sqrt(n)``.
    """
    ok = np.isfinite(values)
    finite = values[ok]
    n = int(finite.size)
    if n == 0:
        return {"mean": math.nan, "std": math.nan, "n": 0, "n_clusters": 0, "ci_low": math.nan, "ci_high": math.nan}
    mean = float(finite.mean())
    std = float(finite.std(ddof=1)) if n > 1 else 0.0
    if clusters is None:
        g, se = n, std / math.sqrt(n)
    else:
        ids, groups = np.unique(np.asarray(clusters)[ok], return_inverse=True)
        g = len(ids)
        residuals = np.bincount(groups, weights=finite - mean, minlength=g)
        se = math.sqrt(g / (g - 1) * float((residuals**2).sum())) / n if g > 1 else 0.0
    half = float(stats.t.ppf(0.975, g - 1) * se) if g > 1 else 0.0
    return {"mean": mean, "std": std, "n": n, "n_clusters": g, "ci_low": mean - half, "ci_high": mean + half}
