"""The report's batched rank statistics give scipy's one-call-at-a-time numbers bit for bit (the statistics files of a
report must not change with the speed-up): Wilcoxon over every method scipy may pick, Spearman and Kendall with ties,
constant inputs and missing values."""

import math

import numpy as np
from scipy import stats

from faithbench.bench.report.ranktests import kendall_tau_b, pair_signs, spearman_rows, wilcoxon_many, wilcoxon_p


def _differences(rng: np.random.Generator) -> list[np.ndarray]:
    """Each length on both sides of scipy's method switches (13: permutation, 50: exact), clean, tied, with zeros,
    with a NaN; and the degenerate ones (empty, all zero)."""
    diffs = [np.array([]), np.zeros(7), np.array([np.nan, np.nan])]
    for n in (1, 2, 3, 5, 8, 13, 14, 20, 48, 50, 51, 66, 120):
        for kind in ("clean", "tied", "zeros", "nan"):
            d = rng.normal(0.2, 1, n)
            if kind == "tied":
                d = np.round(d, 1)
            elif kind == "zeros":
                d[: max(1, n // 4)] = 0.0
            elif kind == "nan":
                d[0] = np.nan
            diffs += [d, d.copy()]  # twins: a batch of more than one
    return diffs


def test_batched_wilcoxon_is_scipys_p_value_of_each_array():
    diffs = _differences(np.random.default_rng(0))
    for alternative in ("two-sided", "greater"):
        one_by_one = [wilcoxon_p(d, alternative) for d in diffs]
        np.testing.assert_array_equal(wilcoxon_many(diffs, alternative), one_by_one)
    assert wilcoxon_many([]) == []


def test_spearman_of_rows_is_scipys_spearmanr_of_each_row():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(200, 9)), rng.normal(size=(200, 9))
    a[::7] = np.round(a[::7])  # ties
    b[::5] = b[::5, :1]  # constant rows: NaN
    a[3] = np.arange(9)
    b[3] = -np.arange(9.0)  # exactly -1
    expected = []
    for x, y in zip(a, b, strict=True):
        if (y == y[0]).all():
            expected.append(math.nan)
        else:
            expected.append(stats.spearmanr(x, y).statistic)
    np.testing.assert_array_equal(spearman_rows(a, b), expected)


def test_kendall_tau_b_is_scipys_on_the_items_both_variables_have():
    rng = np.random.default_rng(2)
    for _ in range(200):
        values = np.round(rng.normal(size=(12, 3)), int(rng.integers(0, 3)))  # coarse rounding: many ties
        values[rng.random((12, 3)) < 0.2] = np.nan
        values[:, 2] = values[0, 2] if rng.random() < 0.2 else values[:, 2]  # a variable tying every item
        defined = ~np.isnan(values)
        signs = pair_signs(values)
        for a, b in ((0, 1), (0, 2), (1, 2)):
            both = defined[:, a] & defined[:, b]
            if both.sum() < 2:
                continue
            tau = kendall_tau_b(signs, a, b, both)
            x, y = values[both, a], values[both, b]
            if (x == x[0]).all() or (y == y[0]).all():
                assert math.isnan(tau)
            else:
                assert tau == float(stats.kendalltau(x, y).statistic)
