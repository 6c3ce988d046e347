"""``bench rescore RUN --sweep``: the scoring-only alternatives each metric table declares, one re-score per
protocol, the rankings compared in ``rescored/protocols.csv`` and the leaderboard's mark for a method tied-best
under every protocol. One tiny run is swept once for the whole module."""

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.report.build import write_tables
from faithbench.bench.report.protocols import (
    COLUMNS,
    EVERY,
    PROTOCOLS_CSV,
    RUN_PROTOCOL,
    SUMMARY_COLUMNS,
    SUMMARY_CSV,
    every_protocol,
    protocol_marks,
    protocol_table,
)
from faithbench.bench.report.statistics_section import leaderboard_stats
from faithbench.bench.report.tables import leaderboard
from faithbench.bench.run.suite import build_suite
from faithbench.bench.run.sweep import plan_protocols, sweep_keys
from faithbench.bench.store.results import read_results
from faithbench.errors import UserError

SUITE = """
name = "protocols"
dataset = "mnist"
models = ["cnn_mnist"]
methods = ["gradient", "input_x_gradient", "gradcam"]
metrics = ["pixel_deletion", "comprehensiveness", "entropy"]
n_samples = 10
batch_size = 10

[deletion]
block_size = 7
"""
KEYS = ["--sweep-key", "deletion.baseline", "--sweep-key", "erasure.summary"]
SWEPT = {f"deletion.baseline={b}" for b in ("blur", "value", "model-input-zero")} | {"erasure.summary=bcos-lm"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, str]:
    """The tiny run and the output of its sweep over the deletion baseline and the erasure summary."""
    root = tmp_path_factory.mktemp("protocols")
    (root / "suite.toml").write_text(SUITE)
    run = root / "run"
    assert main(["run", "--suite", str(root / "suite.toml"), "--out", str(run), "--no-progress", "--no-report"]) == 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["rescore", str(run), "--sweep", *KEYS, "--no-progress"]) == 0
    return run, out.getvalue()


def _tables(run: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    read = {"dtype": {"tied_best": str, "best": str, "best_under_every_protocol": str}, "keep_default_na": False}
    return pd.read_csv(run / "rescored" / PROTOCOLS_CSV, **read), pd.read_csv(run / "rescored" / SUMMARY_CSV, **read)


def test_the_sweep_is_declared_on_the_metric_configs_and_varies_one_setting_at_a_time(tmp_path):
    data = {"name": "plan", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["gradient"],
            "metrics": ["gridpg", "pixel_deletion", "morf", "comprehensiveness", "entropy"],
            "deletion": {"baseline": "blur"}}  # fmt: skip
    suite = build_suite(data, "test")
    declared = sweep_keys(suite)
    assert {"deletion.baseline", "flipping.fill", "erasure.summary", "gridpg.smooth", "gridpg.zero_mass"} <= set(
        declared
    )
    plans = plan_protocols(suite, tmp_path)
    names = [p.name for p in plans]
    assert len(names) == len(set(names))
    for p in plans:
        assert p.settings == {p.table: {p.key: p.value}}  # one setting, the others the run's
        assert p.value != getattr(suite.configs[p.table], p.key)  # never the run's own value
        assert p.folder == tmp_path / "rescored" / p.name
        assert set(p.metrics) == {m for m in suite.metrics if suite.metric_tables[m] == p.table}
    assert "deletion.baseline=mean" in names and "deletion.baseline=blur" not in names
    assert {p.metrics for p in plans if p.table == "flipping"} == {("morf",)}
    assert not any("entropy" in p.metrics for p in plans)  # no settings, nothing to sweep
    only = plan_protocols(suite, tmp_path, ["erasure.summary"])
    assert [p.name for p in only] == ["erasure.summary=bcos-lm"]
    with pytest.raises(UserError, match="erasure.target"):
        plan_protocols(suite, tmp_path, ["erasure.target"])  # changes which class is explained: not scoring-only


def test_the_sweep_writes_one_folder_per_protocol_and_the_table(swept):
    run, text = swept
    for name in SWEPT:
        assert (run / "rescored" / name / "results.csv").is_file(), name
    table, summary = _tables(run)
    assert list(table.columns) == COLUMNS and list(summary.columns) == SUMMARY_COLUMNS
    assert set(table["protocol"]) == {RUN_PROTOCOL, *SWEPT}
    assert set(table["metric"]) == {"pixel_deletion", "comprehensiveness"}  # entropy has nothing to sweep
    by_protocol = table.groupby("protocol")["metric"].agg(set)
    assert by_protocol["deletion.baseline=blur"] == {"pixel_deletion"}
    assert by_protocol["erasure.summary=bcos-lm"] == {"comprehensiveness"}
    assert (table["n_methods"] == 3).all()  # the methods, not the controls
    assert set(summary["metric"]) == {"pixel_deletion", "comprehensiveness"}
    assert summary.set_index("metric").loc["pixel_deletion", "n_protocols"] == 4  # the run's and three others
    assert "rankings across protocols" in text and "best_under_every_protocol" in text
    blur = read_results(run / "rescored" / "deletion.baseline=blur" / "results.csv").set_index(["method", "metric"])
    base = read_results(run / "results.csv").set_index(["method", "metric"])
    assert blur.loc[("gradient", "pixel_deletion"), "mean"] != base.loc[("gradient", "pixel_deletion"), "mean"]


def test_the_runs_own_settings_agree_with_themselves_and_with_the_leaderboard(swept):
    run, _ = swept
    table, _ = _tables(run)
    own = table[table["protocol"] == RUN_PROTOCOL]
    assert (own["tau"] == 1.0).all() and (own["n_flipped_pairs"] == 0).all() and (own["flipped_pairs"] == "").all()
    stats = leaderboard_stats(run, read_results(run / "results.csv")).table  # the leaderboard's own test
    for r in own.itertuples():
        part = stats[(stats["model"] == r.model) & (stats["metric"] == r.metric)]
        assert r.best == part.loc[part["best"], "method"].item()
        assert set(r.tied_best.split()) == set(part.loc[part["tied_best"], "method"])


def test_a_protocol_that_reverses_the_ranking_is_detected(swept, tmp_path):
    run, _ = swept
    fake = tmp_path / "reversed"  # the run's scores of one metric negated: every method pair flips
    fake.mkdir()
    for name, column in (("results.csv", "mean"), ("samples.csv", "value")):
        frame = pd.read_csv(run / name)
        hit = frame["metric"] == "pixel_deletion"
        frame.loc[hit, column] = -frame.loc[hit, column]
        frame.to_csv(fake / name, index=False)
    protocol = SimpleNamespace(name="reversed", table="deletion", key="baseline", value="x",
                               metrics=("pixel_deletion",), folder=fake)  # fmt: skip
    table = protocol_table(run, [protocol])
    row = table[table["protocol"] == "reversed"].iloc[0]
    assert row["tau"] == pytest.approx(-1.0) and row["n_flipped_pairs"] == 3
    assert len(row["flipped_pairs"].split()) == 3
    run_row = table[(table["protocol"] == RUN_PROTOCOL) & (table["metric"] == "pixel_deletion")].iloc[0]
    assert row["best"] != run_row["best"]
    summary = every_protocol(table).set_index("metric").loc["pixel_deletion"]
    assert summary["min_tau"] == pytest.approx(-1.0) and summary["min_tau_protocol"] == "reversed"
    assert summary["total_flipped_pairs"] == 3 and summary["best_changed"] == 1


def test_best_under_every_protocol_is_in_every_protocols_tied_best(swept):
    run, _ = swept
    table, summary = _tables(run)
    for r in summary.itertuples():
        every = set(r.best_under_every_protocol.split())
        tied = [set(t.split()) for t in table[(table["model"] == r.model) & (table["metric"] == r.metric)]["tied_best"]]
        assert len(tied) == r.n_protocols
        assert every == set.intersection(*tied)  # a subset of each, and all they share


def test_the_leaderboard_marks_the_methods_best_under_every_protocol(swept, tmp_path):
    run, _ = swept
    _, summary = _tables(run)
    results = read_results(run / "results.csv")
    stats = leaderboard_stats(run, results)
    marked = {key for key, mark in stats.marks.items() if EVERY in mark}
    expected = {(r.model, m, r.metric) for r in summary.itertuples() for m in r.best_under_every_protocol.split()}
    assert marked == expected and expected  # the tiny run has a method best under every protocol somewhere
    assert all(stats.marks[key].split()[0] in "★≈" for key in marked)  # the mark follows the key's ★ / ≈
    paths = write_tables(leaderboard(results, stats), stats.footnote(), [], tmp_path / "report")
    text = paths["text"].read_text()
    assert f"★ {EVERY}" in text or f"≈ {EVERY}" in text
    assert f"{EVERY} best or not significantly worse (the same test) under every protocol" in text
    assert "4 scoring-only alternatives" in " ".join(text.split())


def test_a_sweep_that_no_longer_matches_the_run_marks_nothing(swept, tmp_path):
    run, _ = swept
    table, _ = _tables(run)
    (tmp_path / "rescored").mkdir()
    table.loc[table["protocol"] == RUN_PROTOCOL, "tied_best"] = ""  # as if the run had been scored again since
    table.to_csv(tmp_path / "rescored" / PROTOCOLS_CSV, index=False)
    tests = leaderboard_stats(run, read_results(run / "results.csv")).table
    marks, notes = protocol_marks(tmp_path, tests)
    assert marks == {} and "cnn_mnist/pixel_deletion" in notes[-1] and "cnn_mnist/comprehensiveness" in notes[-1]
    assert protocol_marks(tmp_path / "nowhere", tests) == ({}, [])  # no sweep: no mark
    marks, notes = protocol_marks(run, tests, alpha=0.01)  # the report's tests at another level than the sweep's
    assert marks == {} and notes == [
        f"No {EVERY} marks: the protocol sweep (rescored/{PROTOCOLS_CSV}) tested at alpha = 0.05."
    ]


def test_sweep_refuses_set_and_out_and_unknown_keys(swept, tmp_path, capsys):
    run, _ = swept
    assert main(["rescore", str(run), "--sweep", "--set", "deletion.baseline=blur"]) == 2
    assert main(["rescore", str(run), "--sweep", "--out", str(tmp_path)]) == 2
    assert main(["rescore", str(run), "--sweep-key", "deletion.block_size"]) == 2
    assert "not a scoring-only setting" in capsys.readouterr().err
