"""The agreement statistics of the report (AttriBench's: Krippendorff's alpha of per-sample method ranks, the MAD
ratio, CLES): hand-computed cases, the peer's definitions written out, and the report's files."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import rankdata

from faithbench.bench.report.agreement import agreement_statistics, cles, effect_sizes, mad_ratio, ordinal_alpha


def test_samples_that_order_the_methods_alike_agree_perfectly_and_reversed_halves_disagree():
    same = np.array([[0.1, 0.5, 0.9], [0.2, 0.4, 0.8], [0.0, 0.3, 0.6], [0.1, 0.2, 0.3]])
    assert ordinal_alpha(same) == pytest.approx(1.0)
    assert ordinal_alpha(same * 10 - 3) == pytest.approx(1.0)  # only each sample's order counts
    split = np.vstack([same[:2], same[2:, ::-1]])
    assert ordinal_alpha(split) < 0


def test_alpha_is_krippendorffs_ordinal_alpha_of_each_samples_ranks():
    import krippendorff

    rng = np.random.default_rng(0)
    values = rng.normal(size=(20, 5)) + np.arange(5)  # methods apart, samples noisy
    expected = krippendorff.alpha(reliability_data=rankdata(values, axis=1), level_of_measurement="ordinal")
    assert ordinal_alpha(values) == pytest.approx(expected)
    assert 0 < ordinal_alpha(values) < 1


def test_alpha_is_undefined_without_two_samples_two_methods_or_any_order():
    assert math.isnan(ordinal_alpha(np.ones((1, 4))))
    assert math.isnan(ordinal_alpha(np.ones((5, 1))))
    assert math.isnan(ordinal_alpha(np.ones((5, 3))))  # every method tied on every sample


def test_mad_ratio_by_hand():
    # two methods, 3 samples: method medians 1 and 11, within-MADs 1 and 1 (mean 1);
    # all six values' median 6, absolute deviations 6, 5, 4, 4, 5, 6 -> median 5
    values = np.array([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    assert mad_ratio(values) == pytest.approx(5.0)
    # the peer's definition (AttriBench's mad_ratio on a samples x methods DataFrame), written out
    df = pd.DataFrame(values)
    within = df.sub(df.median()).abs().median().mean()
    between = df.stack().sub(df.stack().median()).abs().median()
    assert mad_ratio(values) == pytest.approx(between / within)
    assert math.isnan(mad_ratio(np.ones((3, 2))))


def test_cles_counts_ties_half_and_follows_the_direction():
    best, other = np.array([3.0, 2.0, 1.0, 5.0]), np.array([1.0, 2.0, 2.0, np.nan])
    assert cles(best, other, +1.0) == pytest.approx((1 + 0.5 + 0) / 3)
    assert cles(best, other, -1.0) == pytest.approx((0 + 0.5 + 1) / 3)
    # without ties the peer's (best > other).mean()
    a, b = np.array([1.0, 4.0, 3.0]), np.array([0.0, 5.0, 2.0])
    assert cles(a, b, 1.0) == pytest.approx((a > b).mean())


def test_tables_give_one_row_each_and_effect_sizes_align_with_the_paired_tests():
    wide = pd.DataFrame({"a": [0.9, 0.8, 0.7, 0.95], "b": [0.1, 0.9, 0.2, 0.3], "c": [0.5, 0.5, np.nan, 0.4]})
    rows = agreement_statistics({("m", "k"): wide})
    assert list(rows.columns) == ["model", "metric", "alpha", "mad_ratio"] and len(rows) == 1
    tests = pd.DataFrame({"model": "m", "metric": "k", "method": ["a", "b", "c"], "best": [True, False, False]})
    results = pd.DataFrame({"model": ["m"], "metric": ["k"], "higher_is_better": [True]})
    sizes = effect_sizes(tests, {("m", "k"): wide}, results)
    assert math.isnan(sizes[0]) and sizes[1] == pytest.approx(0.75) and sizes[2] == pytest.approx(1.0)


def test_tau_b_matches_scipy_with_ties_and_the_full_sample_converges_to_one():
    from scipy.stats import kendalltau

    from faithbench.bench.report.agreement import _tau_b, ranking_convergence

    rng = np.random.default_rng(0)
    full = np.array([0.3, 0.1, 0.3, 0.7, 0.2])
    sub = rng.integers(0, 3, size=(50, 5)).astype(float)  # many ties
    expected = [kendalltau(row, full).statistic for row in sub]
    np.testing.assert_allclose(_tau_b(sub, full), expected, equal_nan=True)
    # well separated methods: every subset of every size ranks them as all samples do
    separated = pd.DataFrame({"a": rng.normal(0, 0.1, 40), "b": rng.normal(1, 0.1, 40), "c": rng.normal(2, 0.1, 40)})
    # noise: small subsets disagree, the full count agrees with itself
    noise = pd.DataFrame(rng.normal(size=(40, 4)), columns=list("abcd"))
    conv = ranking_convergence({("m", "sep"): separated, ("m", "noise"): noise}, steps=5, draws=100)
    sep, noisy = conv[conv.metric == "sep"], conv[conv.metric == "noise"]
    assert sep["tau"].tolist() == [1.0] * len(sep) and sep["tau_low"].min() == 1.0
    assert noisy["n"].iloc[-1] == 40 and noisy["tau"].iloc[-1] == 1.0
    assert noisy["tau_low"].iloc[0] < 0.5  # two samples of pure noise order the methods at random
    too_small = ranking_convergence({("m", "two"): separated[["a", "b"]]})
    assert too_small.empty  # fewer than 3 methods: no ranking to converge
