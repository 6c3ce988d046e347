"""Leaderboard statistics: known answers for the paired tests, rank stability, agreement and reliability."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from faithbench.bench.report.statistics import (
    holm,
    metric_agreement,
    paired_tests,
    rank_stability,
    rerun_agreement,
    skill_scores,
    split_half,
    wilcoxon_p,
)
from faithbench.bench.store.results import with_job_columns


def _frames(scores: dict[str, np.ndarray], metric: str = "m", higher: bool = True, model: str = "net"):
    """results and samples frames of one (model, metric) table from per-method per-sample scores."""
    samples = pd.concat(
        pd.DataFrame({"model": model, "method": k, "metric": metric, "sample_id": np.arange(len(v)), "value": v})
        for k, v in scores.items()
    )
    results = pd.DataFrame(
        {
            "model": model,
            "method": list(scores),
            "metric": metric,
            "mean": [np.nanmean(v) for v in scores.values()],
            "higher_is_better": higher,
        }
    )
    return results, samples


def test_holm_matches_the_step_down_definition():
    # p sorted: .01, .02, .04 -> 3*.01=.03, 2*.02=.04, 1*.04=.04 (monotone)
    np.testing.assert_allclose(holm(np.array([0.04, 0.01, 0.02])), [0.04, 0.03, 0.04])
    np.testing.assert_allclose(holm(np.array([0.5, 0.6])), [1.0, 1.0])
    assert np.isnan(holm(np.array([np.nan, 0.01]))[0]) and holm(np.array([np.nan, 0.01]))[1] == 0.01


def test_wilcoxon_of_identical_scores_is_one_and_of_no_pairs_nan():
    assert wilcoxon_p(np.zeros(10)) == 1.0
    assert np.isnan(wilcoxon_p(np.array([np.nan])))


def test_methods_that_differ_only_by_noise_come_out_tied():
    rng = np.random.default_rng(0)
    base = rng.normal(50, 10, 200)  # per-sample difficulty shared by both methods
    results, samples = _frames({"a": base + rng.normal(0, 1, 200), "b": base + rng.normal(0, 1, 200)})
    table = paired_tests(results, samples).set_index("method")
    assert table["tied_best"].all()
    assert table["best"].sum() == 1


def test_a_planted_difference_is_separated_even_when_it_is_small_against_the_spread():
    rng = np.random.default_rng(1)
    base = rng.normal(50, 10, 60)  # the spread across samples is 10x the planted 1-point lead
    scores = {"a": base + 1 + rng.normal(0, 0.5, 60), "b": base + rng.normal(0, 0.5, 60), "c": base - 5}
    table = paired_tests(*_frames(scores)).set_index("method")
    assert table.loc["a", "best"] and table.loc["a", "tied_best"]
    assert not table.loc["b", "tied_best"] and not table.loc["c", "tied_best"]
    assert table.loc["b", "p_holm"] < 0.05
    # unpaired, the 1-point lead would vanish in the spread: Welch's t-test cannot separate a and b
    assert stats.ttest_ind(scores["a"], scores["b"], equal_var=False).pvalue > 0.05


def test_lower_is_better_picks_the_smallest_mean():
    results, samples = _frames({"a": np.arange(10.0), "b": np.arange(10.0) + 3}, higher=False)
    table = paired_tests(results, samples).set_index("method")
    assert table.loc["a", "best"] and not table.loc["b", "tied_best"]


def test_methods_scored_on_different_samples_are_compared_on_the_common_ones_and_say_so():
    a, b = np.arange(20.0) + 10, np.arange(20.0)
    b[:5] = np.nan  # b is undefined on five samples
    table = paired_tests(*_frames({"a": a, "b": b})).set_index("method")
    assert table.loc["b", "n_paired"] == 15 and table.loc["b", "paired_subset"]


def test_rank_stability_of_a_clear_winner_and_of_exact_ties():
    rng = np.random.default_rng(2)
    base = rng.normal(0, 1, 50)
    clear = rank_stability(*_frames({"a": base + 10, "b": base, "c": base - 10})).set_index("method")
    assert clear.loc["a", "p_rank1"] == 1.0 and clear.loc["c", "p_rank1"] == 0.0
    assert (clear.loc["a", "rank_low"], clear.loc["a", "rank_high"]) == (1, 1)
    assert (clear.loc["c", "rank_low"], clear.loc["c", "rank_high"]) == (3, 3)
    ties = rank_stability(*_frames({"a": base, "b": base.copy()})).set_index("method")
    assert ties["p_rank1"].tolist() == [0.5, 0.5]  # a two-way tie for first: half each


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.integers(3, 30), st.integers(0, 2**31 - 1))
def test_p_rank1_is_a_distribution_over_methods(n_methods, n_samples, seed):
    rng = np.random.default_rng(seed)
    scores = {f"m{i}": rng.integers(0, 3, n_samples).astype(float) for i in range(n_methods)}  # many ties
    table = rank_stability(*_frames(scores), n_boot=50)
    assert table["p_rank1"].sum() == pytest.approx(1.0)
    assert (
        (table["rank_low"] >= 1) & (table["rank_high"] <= n_methods) & (table["rank_low"] <= table["rank_high"])
    ).all()


def test_metric_agreement_is_kendalls_tau_with_each_metrics_direction():
    up = np.array([1.0, 2.0, 3.0, 4.0])
    results = pd.DataFrame(
        {
            "model": "net",
            "method": list("abcd") * 3,
            "metric": ["gridpg"] * 4 + ["deletion"] * 4 + ["noise"] * 4,
            "mean": np.concatenate([up, -up, [2.0, 1.0, 4.0, 3.0]]),  # deletion: lower is better, same order
            "higher_is_better": [True] * 4 + [False] * 4 + [True] * 4,
        }
    )
    tau = metric_agreement(results).set_index(["metric_a", "metric_b"])["tau"]
    assert tau[("gridpg", "deletion")] == pytest.approx(1.0)
    assert tau[("gridpg", "noise")] == pytest.approx(stats.kendalltau(up, [2, 1, 4, 3]).statistic)


def test_split_half_is_high_for_separated_methods_and_about_zero_for_exchangeable_ones():
    rng = np.random.default_rng(3)
    spread = {f"m{i}": rng.normal(10 * i, 1, 80) for i in range(5)}
    assert split_half(_frames(spread)[1])["split_half"].item() == pytest.approx(1.0)
    exchangeable = []  # 30 methods with the same distribution: no ranking replicates, on average over draws
    for seed in range(10):
        draw = np.random.default_rng(seed)
        same = {f"m{i}": draw.normal(0, 1, 80) for i in range(30)}
        exchangeable.append(split_half(_frames(same)[1], n_splits=50)["split_half"].item())
    assert abs(np.mean(exchangeable)) < 0.25
    assert np.isnan(split_half(_frames({"a": spread["m0"], "b": spread["m1"]})[1])["split_half"].item())


def test_skill_is_one_for_the_oracle_zero_for_random_and_flags_methods_that_do_not_beat_random():
    rng = np.random.default_rng(4)
    random = rng.uniform(0, 0.2, 100)  # GridPG-like shares: random about 1/9, the oracle 1
    scores = {
        "random": random,
        "oracle": np.ones(100),
        "good": np.clip(random + 0.5 + rng.normal(0, 0.05, 100), 0, 1),
        "noise": random + np.concatenate([jitter := rng.normal(0, 0.05, 50), -jitter]),  # random, jittered both ways
    }
    skill = skill_scores(*_frames(scores)).set_index("method")
    assert skill.loc["oracle", "skill"] == pytest.approx(1.0) and skill.loc["random", "skill"] == 0.0
    assert skill.loc["good", "skill"] == pytest.approx((scores["good"].mean() - random.mean()) / (1 - random.mean()))
    assert skill.loc["good", "beats_random"] and skill.loc["oracle", "beats_random"]
    assert not skill.loc["noise", "beats_random"] and not skill.loc["random", "beats_random"]


def test_without_an_oracle_the_skill_is_the_margin_over_random_in_the_metrics_direction():
    base = np.linspace(0.2, 0.8, 30)
    scores = {"random": base, "better": base - 0.1}  # lower is better (deletion AUC)
    skill = skill_scores(*_frames(scores, higher=False)).set_index("method")
    assert np.isnan(skill.loc["better", "skill"]) and skill.loc["better", "margin"] == pytest.approx(0.1)
    assert skill.loc["better", "beats_random"]


def test_rerun_agreement_pairs_each_rerun_with_the_first_run_of_its_method():
    rng = np.random.default_rng(5)
    first = rng.normal(size=40)
    scores = {
        "lime": first,
        "lime@seed1": first + rng.normal(0, 0.01, 40),  # the metric barely moves with the seed
        "shapley_sampling": first,
        "shapley_sampling@seed1": rng.normal(size=40),  # it moves completely
    }
    table = rerun_agreement(with_job_columns(_frames(scores)[1])).set_index("method")  # the columns of old files
    assert table.loc["lime", "rerun_rho"] > 0.99 and abs(table.loc["shapley_sampling", "rerun_rho"]) < 0.4
    assert (table["seed"] == 1).all() and (table["n"] == 40).all()


def test_suite_jobs_rerun_every_seeded_method_with_each_seed():
    from faithbench.bench.run.plan import jobs as plan_jobs
    from faithbench.bench.run.suite import load_suite, with_overrides

    suite = with_overrides(load_suite("smoke"), methods=["gradient", "lime"], controls=["random", "uniform"])
    jobs = {job.name: job for job in plan_jobs(suite)}
    assert list(jobs) == ["gradient", "lime", "random", "uniform", "lime@seed1", "random@seed1"]
    assert jobs["lime@seed1"].params["seed"] == 1 and jobs["lime@seed1"].method == "lime"
    assert (jobs["lime@seed1"].rerun_of, jobs["lime@seed1"].rerun_seed) == ("lime", 1)
    assert [name for name, job in jobs.items() if job.is_control] == ["random", "uniform", "random@seed1"]
    assert jobs["gradient"].columns == {"rerun_of": None, "rerun_seed": None, "is_control": False}
    with pytest.raises(Exception, match="rerun_seeds must be a list of integers >= 0"):
        with_overrides(suite, rerun_seeds=[-1])
