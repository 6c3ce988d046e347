"""The ground-truth tier's controls, suite tiers, and the metrics' report card (known answers)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.bench.cli import main
from faithbench.bench.report.card import card_text, paired_auroc, report_card, truth_tau
from faithbench.bench.report.statistics_section import LeaderboardStats
from faithbench.bench.run.suite import build_suite, load_suite
from faithbench.errors import UserError
from faithbench.models import load_model
from faithbench.models.truth.image_data import truth_images

TRUTH = load_model("truth_additive")


def test_truth_controls_are_the_truth_and_its_corruptions():
    images, labels = truth_images(6, seed=1)
    x = TRUTH.encode(images)
    truth = TRUTH.truth(x, labels).float()
    maps = {name: get_method(name).attribute(TRUTH, x, labels) for name in ("truth", "truth_shifted", "truth_negated")}
    torch.testing.assert_close(maps["truth"], truth)
    torch.testing.assert_close(maps["truth_negated"], -truth)
    torch.testing.assert_close(maps["truth_shifted"], torch.roll(truth, (14, 14), dims=(-2, -1)))
    other = get_method("truth_other_class").attribute(TRUTH, x, labels)
    torch.testing.assert_close(other, TRUTH.truth(x, (labels + 1) % 4).float())
    assert not torch.equal(other, truth)


def test_truth_controls_refuse_models_without_a_known_attribution():
    with pytest.raises(UnsupportedMethodError, match="cannot explain model 'cnn_mnist': its attribution is not known"):
        get_method("truth").check(load_model("cnn_mnist"))


def samples_frame(rows: list[tuple[str, str, int, float]], metric: str = "m") -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["model", "method", "sample_id", "value"])
    return frame.assign(metric=metric, rerun_of=None)


def test_paired_auroc_counts_wins_and_half_ties_per_sample():
    rows = [
        ("a", "good", 0, 0.9), ("a", "bad", 0, 0.1),  # win
        ("a", "good", 1, 0.5), ("a", "bad", 1, 0.5),  # tie
        ("a", "good", 2, 0.2), ("a", "bad", 2, 0.3),  # loss
        ("a", "good", 3, 0.7), ("a", "bad", 3, 0.6),  # win
    ]  # fmt: skip
    auc = paired_auroc(samples_frame(rows), {"m": 1.0}, ["good"], ["bad"])
    assert auc["auroc"].item() == pytest.approx((2 + 0.5) / 4) and auc["n"].item() == 3
    flipped = paired_auroc(samples_frame(rows), {"m": -1.0}, ["good"], ["bad"])  # lower is better
    assert flipped["auroc"].item() == pytest.approx((1 + 0.5) / 4)


def test_a_metric_that_always_prefers_the_truth_is_better_than_chance_and_a_coin_is_not():
    rng = np.random.default_rng(0)
    rows, coin = [], []
    for s in range(40):
        rows += [("a", "truth", s, 1.0), ("a", "truth_shifted", s, 0.0)]
        coin += [("a", "truth", s, rng.random()), ("a", "truth_shifted", s, rng.random())]
    frame = pd.concat([samples_frame(rows, "sharp"), samples_frame(coin, "coin")])
    auc = paired_auroc(frame, {"sharp": 1.0, "coin": 1.0}, ["truth"], ["truth_shifted"]).set_index("metric")
    assert auc.loc["sharp", "auroc"] == 1.0 and auc.loc["sharp", "p"] < 1e-9
    assert 0.3 < auc.loc["coin", "auroc"] < 0.7 and auc.loc["coin", "p"] > 0.05


def results_frame(means: dict[str, dict[str, float]], higher: dict[str, bool]) -> pd.DataFrame:
    rows = [
        dict(model="t", metric=metric, method=method, mean=v, higher_is_better=higher[metric], is_control=False)
        for metric, by_method in means.items()
        for method, v in by_method.items()
    ]
    return pd.DataFrame(rows).assign(rerun_of=None)


def test_truth_tau_ranks_the_methods_against_the_reference_metric():
    truth = {"a": 0.9, "b": 0.5, "c": 0.1, "d": -0.2}
    same = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}  # lower is better: the truth's order
    reverse = {"a": 0.9, "b": 0.5, "c": 0.2, "d": 0.1}  # lower is better: reversed
    frame = results_frame(
        {"truth_correlation": truth, "same": same, "reverse": reverse},
        {"truth_correlation": True, "same": False, "reverse": False},
    )
    tau = truth_tau(frame).set_index("metric")["tau_truth"]
    assert tau["same"] == pytest.approx(1.0) and tau["reverse"] == pytest.approx(-1.0)
    assert "truth_correlation" not in tau  # itself: 1 by definition


def test_the_card_flags_a_metric_no_better_than_chance():
    rows = []
    for s in range(30):
        rows += [("t", "truth", s, 1.0), ("t", "truth_negated", s, 0.0), ("t", "truth_shifted", s, 0.0)]
    good = samples_frame(rows, "good")
    ties = samples_frame([(m, k, s, 0.5) for m, k, s, _ in rows], "flat")
    means = {"truth_correlation": {"truth": 1.0}, "good": {"truth": 1.0}, "flat": {"truth": 0.5}}
    results = results_frame(means, {"truth_correlation": True, "good": True, "flat": True})
    empty = pd.DataFrame()
    stats = LeaderboardStats(empty, pd.DataFrame(columns=["metric_a", "metric_b", "tau"]), empty, empty, empty, 0.05, 0)
    card = report_card(results, None, stats, results, pd.concat([good, ties])).set_index("metric")
    assert card.loc["good", "AUROC truth"] == 1.0 and card.loc["good", "verdict"] == "tells faithful from unfaithful"
    assert card.loc["flat", "AUROC truth"] == 0.5 and card.loc["flat", "verdict"].startswith("no better than chance")
    assert math.isnan(card.loc["good", "AUROC controls"])
    assert card_text(card.reset_index()).loc[0, "AUROC controls"] == "–"


def test_tiers_are_suite_names_or_files_without_tiers_of_their_own(tmp_path):
    base = {"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["entropy"]}
    assert build_suite({**base, "tiers": ["truth"]}).tiers == ("truth",)
    with pytest.raises(UserError, match="unknown suite 'truht' \\(did you mean truth"):
        build_suite({**base, "tiers": ["truht"]})
    with pytest.raises(UserError, match="tier 'smoke' has tiers of its own \\(truth\\)"):
        build_suite({**base, "tiers": ["smoke"]})
    with pytest.raises(UserError, match="tier suite file .*missing.toml does not exist"):
        build_suite({**base, "tiers": ["missing.toml"]}, "t.toml", tmp_path)
    assert load_suite("truth").tiers == ()


TIER = """
name = "tiny-truth"
dataset = "truth"
models = ["truth_additive"]
methods = ["gradient", "deeplift", "gradcam", "truth", "truth_shifted", "truth_other_class", "truth_negated"]
metrics = ["truth_correlation", "truth_mass", "pixel_deletion", "entropy"]
controls = ["random", "uniform"]
n_samples = 12
batch_size = 12
[deletion]
block_size = 7
fractions = [0.0, 0.25, 0.5]
"""


def test_a_run_runs_its_tiers_into_sub_folders_and_the_report_card_reads_them(tmp_path, capsys):
    (tmp_path / "tiny-truth.toml").write_text(TIER)
    main_suite = tmp_path / "main.toml"
    main_suite.write_text(
        'name = "main"\nmodels = ["cnn_mnist"]\nmethods = ["gradient", "input_x_gradient", "gradcam"]\n'
        'metrics = ["pixel_deletion", "entropy"]\ncontrols = ["random", "uniform"]\nn_samples = 8\nbatch_size = 8\n'
        'tiers = ["tiny-truth.toml"]\n[deletion]\nblock_size = 7\nfractions = [0.0, 0.25, 0.5]\n'
    )
    out = tmp_path / "run"
    assert main(["run", "--suite", str(main_suite), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert (
        out / "tiny-truth" / "results.csv"
    ).exists() and f"tier tiny-truth: {out / 'tiny-truth' / 'report'}" in printed
    card = pd.read_csv(out / "report" / "report_card.csv").set_index("metric")
    assert {"pixel_deletion", "entropy", "truth_correlation", "truth_mass"} <= set(card.index)
    assert card.loc["truth_mass", "AUROC truth"] > 0.5  # the tier's scores reached the main run's card
    assert 0 <= card.loc["pixel_deletion", "AUROC controls"] <= 1  # the main run's own methods vs its controls
    assert (out / "report" / "report_card.png").exists()
    page = (out / "report" / "index.html").read_text()
    assert "Report card of the metrics" in page
