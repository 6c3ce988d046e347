"""The rank statistics behind :mod:`faithbench.bench.report.statistics`, many at once: Wilcoxon signed-rank p-values,
Spearman's rho and Kendall's tau-b give, bit for bit, what scipy's one-at-a-time calls give (a report makes
thousands of them, and scipy's per-call overhead was most of the report's statistics time)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

EXACT_MAX = 50  # scipy's wilcoxon: exact null distribution up to this many differences, normal approximation above
PERMUTATION_MAX = 13  # ... and a permutation test up to this many where there are ties or zeros


def wilcoxon_p(diffs: np.ndarray, alternative: str = "two-sided") -> float:
    """Wilcoxon signed-rank p-value of paired differences (1 when all are zero, NaN when none);
    ``alternative="greater"``: the one-sided test that the differences are positive."""
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size == 0:
        return math.nan
    if not np.any(diffs != 0):
        return 1.0
    return float(stats.wilcoxon(diffs, zero_method="wilcox", alternative=alternative).pvalue)


def wilcoxon_many(diffs: list[np.ndarray], alternative: str = "two-sided") -> list[float]:
    """:func:`wilcoxon_p` of each array of differences. scipy picks its method per call from the whole input (the
    exact distribution, the normal approximation or a permutation test), so the arrays are batched only with
    arrays it would test the same way: same length and, at most :data:`EXACT_MAX` long, all free of ties and zeros
    or all with some; each batch is one vectorised call whose p-values are elementwise the single calls'."""
    out = [math.nan] * len(diffs)
    kept: list[np.ndarray] = []
    batches: dict[tuple[int, bool], list[int]] = {}
    for i, d in enumerate(diffs):
        d = d[np.isfinite(d)]
        kept.append(d)
        if d.size == 0:
            continue
        nonzero = np.abs(d[d != 0])
        if nonzero.size == 0:
            out[i] = 1.0
            continue
        clean = nonzero.size == d.size and np.unique(nonzero).size == d.size
        if d.size > EXACT_MAX:
            clean = True  # one method whatever the ties: the normal approximation
        elif not clean and d.size <= PERMUTATION_MAX:
            out[i] = wilcoxon_p(d, alternative)
            continue
        batches.setdefault((d.size, clean), []).append(i)
    for rows in batches.values():
        res = stats.wilcoxon(np.stack([kept[i] for i in rows]), zero_method="wilcox", alternative=alternative, axis=1)
        for i, p in zip(rows, np.atleast_1d(res.pvalue), strict=True):
            out[i] = float(p)
    return out


def spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho between the rows of ``a`` and ``b`` (K, M), as ``scipy.stats.spearmanr`` computes it row by
    row (the ranks' ``np.corrcoef``; NaN where a row is constant): the ranks' sums and products are exact, so the
    order of the sums does not matter."""
    ra, rb = stats.rankdata(a, axis=1), stats.rankdata(b, axis=1)
    ra, rb = ra - ra.mean(1, keepdims=True), rb - rb.mean(1, keepdims=True)
    scale = np.true_divide(1, a.shape[1] - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (ra * rb).sum(1) * scale / np.sqrt((rb * rb).sum(1) * scale) / np.sqrt((ra * ra).sum(1) * scale)
    constant = (a == a[:, :1]).all(1) | (b == b[:, :1]).all(1)
    return np.where(constant, np.nan, np.clip(rho, -1, 1))


def pair_signs(values: np.ndarray) -> np.ndarray:
    """(M, M, K) signs of ``values[i, k] - values[j, k]`` (M items, K variables): the pairs Kendall's tau counts."""
    return (values[:, None, :] > values[None, :, :]).astype(np.int64) - (values[:, None, :] < values[None, :, :])


def kendall_tau_b(signs: np.ndarray, a: int, b: int, both: np.ndarray) -> float:
    """``scipy.stats.kendalltau(x, y).statistic`` of variables ``a`` and ``b`` over the items ``both`` (mask) from
    their :func:`pair_signs`: the same integer counts of concordant, discordant and tied pairs, the same formula."""
    upper = np.triu(both[:, None] & both[None, :], k=1)
    sa, sb = signs[:, :, a][upper], signs[:, :, b][upper]
    tot, xtie, ytie = int(upper.sum()), int((sa == 0).sum()), int((sb == 0).sum())
    if xtie == tot or ytie == tot:
        return math.nan
    tau = int((sa * sb).sum()) / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return float(np.minimum(1.0, max(-1.0, tau)))
