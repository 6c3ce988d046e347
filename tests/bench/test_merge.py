"""Runs that combine: two colleagues' runs give one leaderboard after compare's checks, refused (nothing written) when
they are not comparable; every run has a JSON export beside its CSVs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import faithbench
from faithbench.bench.cli import main
from faithbench.bench.report.merge import merge_runs
from faithbench.bench.report.statistics_section import leaderboard_stats
from faithbench.bench.store.results import read_results
from faithbench.errors import UserError

MODELS, METRICS = ["cnn_mnist", "bcos_cnn_mnist"], ["pixel_deletion", "entropy"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("colleagues")
    ask = dict(n_samples=8, out=None)
    folders = {}
    for name, methods, extra in (
        ("a", ["gradient", "input_x_gradient"], {}),
        ("b", ["integrated_gradients", "gradient"], {}),
        ("seed", ["integrated_gradients"], {"seed": 1}),
        ("block", ["integrated_gradients"], {"pixel_deletion": {"block_size": 4}}),
        ("steps", ["integrated_gradients"], {"method_params": {"integrated_gradients": {"n_steps": 8}}}),
    ):
        folders[name] = root / name
        faithbench.benchmark(MODELS, methods, METRICS, **{**ask, "out": folders[name]}, **extra)
    return folders


def test_two_runs_give_one_leaderboard_with_paired_statistics_on_common_samples(runs, tmp_path):
    merged = merge_runs([runs["a"], runs["b"]], tmp_path / "m")
    results = read_results(tmp_path / "m" / "results.csv")
    assert sorted(set(results["method"])) == ["gradient", "input_x_gradient", "integrated_gradients"]
    assert len(results) == len(results.drop_duplicates(["model", "method", "metric"])) == 2 * 3 * 2
    gradient_a = read_results(runs["a"] / "results.csv").set_index(["model", "method", "metric"])
    kept = results.set_index(["model", "method", "metric"]).loc[gradient_a.index, "mean"]
    pd.testing.assert_series_equal(kept, gradient_a["mean"])  # the shared rows: the first run's
    assert any("4 row(s) in several runs with the same params" in n for n in merged.notes)
    samples = pd.read_csv(tmp_path / "m" / "samples.csv")
    assert set(samples["method"]) == set(results["method"])
    stats = leaderboard_stats(tmp_path / "m", results, n_boot=100)
    assert set(stats.table["n_paired"]) == {8}  # every pair on the 8 samples both runs scored
    record = json.loads((tmp_path / "m" / "run.json").read_text())
    assert [p["folder"] for p in record["merged_from"]] == [str(runs["a"].resolve()), str(runs["b"].resolve())]
    assert record["suite"]["methods"] == ["gradient", "input_x_gradient", "integrated_gradients"]
    assert set(record["models"]) == set(MODELS)  # every model's accuracy line kept
    document = json.loads((tmp_path / "m" / "results.json").read_text())
    assert len(document["rows"]) == len(results) and isinstance(document["rows"][0]["params"], dict)


@pytest.mark.parametrize(
    "other, why",
    [
        ("seed", "seed 0 → 1 (paired statistics need the same images)"),
        ("block", "metric settings differ: [deletion].block_size 2 → 4"),
        ("steps", 'method parameters differ: integrated_gradients {"'),
    ],
)
def test_runs_that_are_not_comparable_are_refused_and_nothing_is_written(runs, tmp_path, other, why):
    with pytest.raises(UserError, match="the runs are not comparable, so not merged") as info:
        merge_runs([runs["b"], runs[other]], tmp_path / "m")
    assert why in str(info.value)
    assert not (tmp_path / "m").exists()


def test_report_of_two_runs_merges_them_first(runs, tmp_path, capsys):
    assert main(["report", str(runs["a"]), str(runs["b"] / "results.csv"), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert f"merged 2 runs into {tmp_path / 'm'}: 12 (model, method, metric) rows" in out
    assert (tmp_path / "m" / "report" / "index.html").is_file()
    assert main(["merge", str(runs["a"]), str(runs["seed"]), "--out", str(tmp_path / "n")]) == 2
    assert "seed 0 → 1" in capsys.readouterr().err


def test_every_run_writes_its_json_export(runs):
    document = json.loads((runs["a"] / "results.json").read_text())
    results = read_results(runs["a"] / "results.csv")
    assert document["format"] == "faithbench-results/1"
    assert document["suite"]["seed"] == 0 and str(document["provenance"]["seed"]) == "0"
    assert len(document["rows"]) == len(results)
    row = document["rows"][0]
    assert row["mean"] == pytest.approx(results["mean"].iloc[0], rel=1e-15)
    assert row["params"] == json.loads(results["params"].iloc[0])
