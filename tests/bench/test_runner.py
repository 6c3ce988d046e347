"""The product as a user meets it: suites, run, resume, results files, report, compare, torchrun."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from faithbench.attributions import CONTROLS
from faithbench.bench.cli import main
from faithbench.bench.report.gate import compare, paired_bootstrap
from faithbench.bench.run import runner, work
from faithbench.bench.run.plan import jobs
from faithbench.bench.run.suite import build_suite, load_suite, with_overrides
from faithbench.bench.run.suite_files import available_suites
from faithbench.bench.store.intervals import summarise
from faithbench.bench.store.tidy import RESULT_COLUMNS

TINY = """
name = "tiny"
description = "test suite"
dataset = "mnist"
models = ["cnn_mnist", "bcos_cnn_mnist"]
methods = ["native", "gradient"]
controls = false
metrics = ["gridpg", "pixel_deletion", "pixel_insertion", "comprehensiveness", "sufficiency", "entropy", "gini"]
seed = 0
n_samples = 6
batch_size = 8

[gridpg]
preset = "bcos-v2"
n_grids = 2

[deletion]
block_size = 4
"""


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def tiny_run(tiny_suite, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "tiny"
    assert main(["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress"]) == 0
    return out


# ----------------------------------------------------------------------------- suites


def test_shipped_suites_load_and_validate():
    assert {"vision", "smoke", "imagenet"} <= set(available_suites())
    assert load_suite("imagenet").dataset == "imagefolder"
    vision = load_suite("vision")
    assert "aloe_vit_mnist" in vision.models and "gridpg" in vision.metrics
    assert load_suite("smoke").n_samples < vision.n_samples
    for name in available_suites():  # every shipped file validates (no model is built)
        assert load_suite(name).name == name


def test_suite_errors_name_the_valid_choices(tmp_path):
    with pytest.raises(
        ValueError,
        match="unknown suite 'cifar'; valid suites: animal-ablation, bcos-ablation, bcos-posthoc, bcos-vit, imagenet, "
        "imagenet-random, in-domain, smoke, smoke-text, stability, text, text-b-sweep, text-gpu, text-hf, text-topic, "
        "truth, truth-text, vi",
    ):
        load_suite("cifar")
    with pytest.raises(ValueError, match=r"unknown model\(s\) resnet9 \(did you mean .*resnet18.*\); `python -m bench"):
        with_overrides(load_suite("smoke"), models=["resnet9"])
    with pytest.raises(ValueError, match="unknown metric\\(s\\) accuracy"):
        with_overrides(load_suite("smoke"), metrics=["accuracy"])
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmodels = ["cnn_mnist"]\nmethods = ["gradient"]\nmetrics = ["gini"]\nepochs = 3\n')
    with pytest.raises(ValueError, match=r"unknown key\(s\) epochs"):
        load_suite(str(bad))
    with pytest.raises(ValueError, match="GridPG preset 'tpami'"):
        with_overrides(load_suite("smoke"), gridpg={"preset": "tpami"})


def test_a_retired_key_is_read_without_it(capsys):
    keys = {"name": "old", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["entropy"], "pool_calls": True}
    assert build_suite(keys, "old.toml").name == "old"  # a suite file written before the pool went
    assert "old.toml: pool_calls ignored (removed: each metric calls the model on its own)" in capsys.readouterr().err
    build_suite(keys, "runs/x/run.json")  # a run recorded before: read as it ran, silently
    assert capsys.readouterr().err == ""


def test_cli_reports_user_errors_in_one_line(capsys, tmp_path):
    assert main(["run", "--suite", "nope", "--out", str(tmp_path)]) == 2
    assert "error: unknown suite 'nope'" in capsys.readouterr().err
    assert main(["run", "--suite", "imagenet", "--data-root", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "--data-root" in capsys.readouterr().err and "does not exist"
    assert main(["run", "--suite", "vision", "--data-root", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "classify the zoo's 28 px images" in capsys.readouterr().err
    assert main(["run", "--suite", "imagenet", "--out", str(tmp_path)]) == 2
    assert "needs a data root (--data-root, or data_root in a suite file)" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "none.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_real_data_with_missing_pretrained_weights_fails_clearly(tmp_path, capsys, monkeypatch):
    import torch
    import torchvision
    from PIL import Image

    for cls in ("n01", "n02"):
        (tmp_path / "val" / cls).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (32, 32), (40 * i, 80, 120)).save(tmp_path / "val" / cls / f"{i}.png")

    def offline(*args, **kwargs):
        raise OSError("no internet")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    monkeypatch.setattr(torchvision.models._api, "load_state_dict_from_url", offline)
    code = main(
        [
            "run",
            "--suite",
            "imagenet",
            "--data-root",
            str(tmp_path / "val"),
            "--models",
            "resnet18",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    assert code == 2
    assert "could not load torchvision resnet18 weights ResNet18_Weights.IMAGENET1K_V1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- results


def test_results_have_one_row_per_model_method_metric_with_provenance(tiny_run):
    results = pd.read_csv(tiny_run / "results.csv")
    assert list(results.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
    # cnn_mnist x native is unsupported: 3 pairs x 7 metrics.
    assert len(results) == 21 and not results.duplicated(["model", "method", "metric"]).any()
    for col in (
        "faithbench_version",
        "git_revision",
        "torch_version",
        "captum_version",
        "zennit_version",
        "bcos_version",
        "lxt_version",
        "device",
        "seed",
        "params",
    ):
        assert results[col].notna().all(), col
    gridpg = results[(results.metric == "gridpg") & (results.method == "native")].iloc[0]
    assert gridpg["n"] == 18 and json.loads(gridpg["params"])["preset"] == "bcos-v2"
    skipped = json.loads((tiny_run / "skipped.json").read_text())
    assert skipped == [{"model": "cnn_mnist", "method": "native", "reason": skipped[0]["reason"]}]
    assert "needs a B-cos" in skipped[0]["reason"]


def test_aggregates_are_recomputable_from_the_per_sample_file(tiny_run):
    results = pd.read_csv(tiny_run / "results.csv")
    samples = pd.read_csv(tiny_run / "samples.csv")
    for _, row in results.iterrows():
        vals = samples[(samples.model == row.model) & (samples.method == row.method) & (samples.metric == row.metric)]
        assert len(vals) == row.n + row.n_dropped
        assert vals.value.mean() == pytest.approx(row["mean"], rel=1e-9, abs=1e-12)
        assert int(vals.undefined.sum()) == row.n_undefined
    curves = pd.read_csv(tiny_run / "curves.csv")
    assert set(curves.metric) == {"pixel_deletion", "pixel_insertion", "comprehensiveness", "sufficiency"}


def test_summarise_by_hand():
    s = summarise(np.array([1.0, 2.0, 3.0, np.nan]))
    assert s["n"] == 3 and s["mean"] == 2.0 and s["std"] == 1.0
    assert s["ci_high"] - s["mean"] == pytest.approx(4.302652729911275 / np.sqrt(3))
    assert summarise(np.array([np.nan]))["n"] == 0


def test_report_writes_tables_and_plots(tiny_run):
    for name in (
        "leaderboard.md",
        "index.html",
        "leaderboard.tex",
        "leaderboard.txt",
        "gridpg.png",
        "pixel_deletion.png",
        "curves_cnn_mnist.png",
        "curves_bcos_cnn_mnist.png",
        "example_maps.png",
        "faithfulness_vs_cost.png",
        "rank_intervals_cnn_mnist.png",
        "rank_intervals_bcos_cnn_mnist.png",
        "statistics.csv",
        "reliability.csv",
    ):
        assert (tiny_run / "report" / name).stat().st_size > 100, name
    md = (tiny_run / "report" / "leaderboard.md").read_text()
    assert "| bcos_cnn_mnist | native |" in md and "gridpg ↑ [%]" in md
    assert "★" in md and "Wilcoxon signed-rank" in md and "alpha = 0.05" in md  # tied-best marks, test and level
    assert r"$\star$" in (tiny_run / "report" / "leaderboard.tex").read_text()
    stats = pd.read_csv(tiny_run / "report" / "statistics.csv")
    assert stats.groupby(["model", "metric"])["best"].sum().eq(1).all()  # one best per model and metric


# ----------------------------------------------------------------------------- resume


def test_a_second_run_resumes_without_recomputing(tiny_suite, tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "copy"
    shutil.copytree(tiny_run, out)

    def boom(*args, **kwargs):
        raise AssertionError("a finished unit was recomputed")

    monkeypatch.setattr(work, "evaluate_unit", boom)
    assert main(["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress", "--no-report"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "samples.csv"), pd.read_csv(tiny_run / "samples.csv"))


def test_an_interrupted_run_loses_nothing_and_resumes_to_the_same_results(tiny_suite, tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "interrupted"
    real = work.evaluate_unit
    calls = []

    def interrupt_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(work, "evaluate_unit", interrupt_second)
    assert main(["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress", "--no-report"]) == 130
    partial = pd.read_csv(out / "results.csv")
    assert set(partial.method) == {"gradient"} and set(partial.model) == {"cnn_mnist"}
    monkeypatch.setattr(work, "evaluate_unit", real)
    assert main(["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress", "--no-report"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "samples.csv"), pd.read_csv(tiny_run / "samples.csv"))
    pd.testing.assert_frame_equal(pd.read_csv(out / "curves.csv"), pd.read_csv(tiny_run / "curves.csv"))


def test_changed_settings_recompute_only_what_changed(tiny_suite, tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "changed"
    shutil.copytree(tiny_run, out)
    real, calls = work.evaluate_unit, []

    def count(*args, **kwargs):
        calls.append(args[0].method.name)
        return real(*args, **kwargs)

    monkeypatch.setattr(work, "evaluate_unit", count)
    assert (
        main(["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress", "--no-report", "--n-samples", "5"])
        == 0
    )
    assert len(calls) == 3  # every unit depends on n_samples
    calls.clear()
    assert (
        main(
            [
                "run",
                "--suite",
                str(tiny_suite),
                "--out",
                str(out),
                "--no-progress",
                "--no-report",
                "--n-samples",
                "5",
                "--methods",
                "native,gradient,input_x_gradient",
            ]
        )
        == 0
    )
    assert calls == ["input_x_gradient", "input_x_gradient"]


def test_max_batch_bounds_every_model_call_of_every_method_and_metric(tiny_suite, tiny_run, tmp_path, monkeypatch):
    real, sizes = runner.load_model, []

    def counted(name, device="cpu", **kwargs):
        model = real(name, device=device, **kwargs)
        for module in model.module.modules():  # some methods run part of the model (native_normalised)
            module.register_forward_pre_hook(
                lambda m, args: sizes.extend(a.shape[0] for a in args[:1] if hasattr(a, "dim") and a.dim())
            )
        return model

    suite = tmp_path / "bounded.toml"
    methods = "native, gradient, integrated_gradients, deeplift, gradcam, lrp, lime, shapley_sampling"
    suite.write_text(
        TINY.replace('methods = ["native", "gradient"]', f"methods = {json.dumps(methods.split(', '))}").replace(
            '"gini"]', '"gini", "completeness_gap"]'
        )
        + "\n[method_params.integrated_gradients]\nn_steps = 4\n[method_params.lime]\nn_samples = 12\n"
        + 'segmentation = "slic"\n[method_params.shapley_sampling]\nn_samples = 1\n'
    )
    monkeypatch.setattr(runner, "load_model", counted)
    monkeypatch.setattr(work, "load_model", counted)
    out = tmp_path / "bounded"
    args = ["run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report", "--max-batch", "5"]
    assert main(args) == 0
    assert max(sizes) == 5  # reached (the hooks see the calls), never exceeded
    bounded = pd.read_csv(out / "results.csv")
    assert {"lime", "shapley_sampling", "integrated_gradients", "deeplift"} <= set(bounded.method)
    # Per-unit cost: every row counts its model calls; the inputs they carried respect the bound.
    assert (bounded.model_calls >= 0).all() and (bounded.model_inputs <= 5 * bounded.model_calls).all()
    per_unit = bounded.groupby(["model", "method"])[["model_calls", "model_inputs"]].sum()
    assert (per_unit.model_calls > 0).all() and bounded.peak_memory_mb.isna().all()  # no allocator stats on CPU
    # The bound changes memory, not scores: the tiny run (max_batch 256) agrees on its units.
    reference = pd.read_csv(tiny_run / "results.csv").set_index(["model", "method", "metric"])["mean"]
    shared = bounded.set_index(["model", "method", "metric"])["mean"].loc[reference.index]
    np.testing.assert_allclose(shared.to_numpy(), reference.to_numpy(), rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- compare


def test_compare_passes_on_identical_runs_and_fails_on_a_deliberate_regression(tiny_run, tmp_path, capsys):
    base = tiny_run / "results.csv"
    assert main(["compare", str(base), str(base), "--two-sided"]) == 0
    regressed = tmp_path / "regressed"
    shutil.copytree(tiny_run, regressed)
    res = pd.read_csv(regressed / "results.csv")
    hit = (res.model == "bcos_cnn_mnist") & (res.method == "native") & (res.metric == "gridpg")
    res.loc[hit, "mean"] -= 5.0  # GridPG is higher-is-better: lower is a regression
    res.to_csv(regressed / "results.csv", index=False)
    capsys.readouterr()
    assert main(["compare", str(base), str(regressed / "results.csv")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out and "FAIL: 1 row(s)" in out
    assert main(["compare", str(base), str(regressed / "results.csv"), "--tolerance", "6"]) == 0
    # An improvement passes one-sided and fails two-sided.
    res.loc[hit, "mean"] += 10.0
    res.to_csv(regressed / "results.csv", index=False)
    assert main(["compare", str(base), str(regressed / "results.csv")]) == 0
    assert main(["compare", str(base), str(regressed / "results.csv"), "--two-sided"]) == 1


def test_compare_fails_when_a_row_disappears(tiny_run, tmp_path):
    res = pd.read_csv(tiny_run / "results.csv")
    res[res.metric != "gini"].to_csv(tmp_path / "results.csv", index=False)
    table, failed = compare(tiny_run / "results.csv", tmp_path / "results.csv")
    assert failed and set(table[table.status == "MISSING"].metric) == {"gini"}


def test_compare_relative_tolerance_and_direction(tiny_run, tmp_path):
    res = pd.read_csv(tiny_run / "results.csv")
    hit = (res.metric == "pixel_deletion") & (res.method == "native")  # lower is better
    res.loc[hit, "mean"] *= 1.0005
    res.to_csv(tmp_path / "results.csv", index=False)
    _, failed = compare(tiny_run / "results.csv", tmp_path / "results.csv", rel_tolerance=1e-4)
    assert failed
    _, failed = compare(tiny_run / "results.csv", tmp_path / "results.csv", two_sided=True)  # the default: 1e-3
    assert not failed


def test_compare_fails_when_a_score_turns_nan_or_a_count_changes(tiny_run, tmp_path):
    base = tiny_run / "results.csv"
    res = pd.read_csv(base)
    hit = (res.model == "bcos_cnn_mnist") & (res.method == "native") & (res.metric == "gridpg")

    def gate(frame, **kw):
        frame.to_csv(tmp_path / "results.csv", index=False)
        table, failed = compare(base, tmp_path / "results.csv", **kw)
        return failed, set(table.status) - {"ok"}

    nan = res.copy()
    nan.loc[hit, "mean"] = np.nan
    assert gate(nan) == (True, {"NAN"})
    assert gate(nan, two_sided=True, rel_tolerance=1.0) == (True, {"NAN"})
    for col in ("n", "n_undefined", "n_dropped"):
        counted = res.copy()
        counted.loc[hit, col] += 1
        assert gate(counted) == (True, {"COUNTS"}), col
    # NaN -> finite: an improvement one-sided, a failure two-sided.
    nan.to_csv(tmp_path / "nan_base.csv", index=False)
    res.to_csv(tmp_path / "finite.csv", index=False)
    table, failed = compare(tmp_path / "nan_base.csv", tmp_path / "finite.csv")
    assert not failed and set(table.status) == {"ok", "improved"}
    _, failed = compare(tmp_path / "nan_base.csv", tmp_path / "finite.csv", two_sided=True)
    assert failed


def test_compare_and_report_name_the_bad_file_in_one_line(tiny_run, tmp_path, capsys):
    base = str(tiny_run / "results.csv")
    assert main(["compare", str(tiny_run), base]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tiny_run} is a folder" in err and "did you mean" in err
    (tmp_path / "empty.csv").write_text("")
    assert main(["compare", base, str(tmp_path / "empty.csv")]) == 2
    assert f"{tmp_path / 'empty.csv'} is not a readable results CSV" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder without a results.csv" in capsys.readouterr().err


def test_paired_bootstrap_known_answers():
    assert paired_bootstrap(np.full(20, 0.5)) == (0.5, 0.5)
    low, high = paired_bootstrap(np.array([-1.0, 1.0] * 50))
    assert low < 0 < high
    diffs = np.random.default_rng(0).normal(2.0, 1.0, 400)
    low, high = paired_bootstrap(diffs)
    assert low < 2.0 < high and high - low < 0.3


# ----------------------------------------------------------------------------- torchrun


def test_torchrun_with_two_processes_equals_one_process(tiny_suite, tiny_run, tmp_path):
    out = tmp_path / "dist"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",  # = torchrun, without relying on PATH
            "--nproc_per_node=2",
            "-m",
            "bench",
            "run",
            "--suite",
            str(tiny_suite),
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    single, multi = pd.read_csv(tiny_run / "samples.csv"), pd.read_csv(out / "samples.csv")
    assert len(single) == len(multi)
    merged = single.merge(multi, on=["model", "method", "metric", "sample_id"])
    assert len(merged) == len(single)
    np.testing.assert_allclose(merged.value_x, merged.value_y, rtol=1e-5, atol=1e-4)
    _, failed = compare(tiny_run / "results.csv", out / "results.csv", tolerance=1e-4, two_sided=True)
    assert not failed


def test_python_dash_m_bench_run_prints_leaderboard_and_paths(tiny_suite, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--suite",
            str(tiny_suite),
            "--out",
            str(tmp_path / "r"),
            "--no-progress",
            "--no-report",
            "--methods",
            "native",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "leaderboard (tiny" in proc.stdout and "results.csv" in proc.stdout


def test_resume_never_mixes_code_or_weights(tiny_suite, tiny_run, tmp_path, monkeypatch):
    """Units computed by other code or with other weights are recomputed, never reused."""
    from faithbench.bench.run import plan
    from faithbench.models import adapter

    out = tmp_path / "resume"
    real, calls = work.evaluate_unit, []

    def count(*args, **kwargs):
        calls.append((args[0].model.name, args[0].method.name))
        return real(*args, **kwargs)

    monkeypatch.setattr(work, "evaluate_unit", count)
    args = [
        "run",
        "--suite",
        str(tiny_suite),
        "--out",
        str(out),
        "--no-progress",
        "--no-report",
        "--methods",
        "gradient",
    ]
    shutil.copytree(tiny_run, out)
    assert main(args) == 0 and calls == []
    monkeypatch.setattr(plan, "code_identity", lambda: "an upgraded faithbench")  # the plan key reads it
    assert main(args) == 0 and len(calls) == 2  # every unit: the code changed
    calls.clear()
    assert main(args) == 0 and calls == []  # ...and now they are current
    rebuilt = adapter.state_sha256
    monkeypatch.setattr(
        adapter,
        "state_sha256",
        lambda state: "rebuilt" if "features.0.weight" in state else rebuilt(state),  # cnn_mnist only
    )
    assert main(args) == 0 and calls == [("cnn_mnist", "gradient")]
    results = pd.read_csv(out / "results.csv")
    assert set(results[results.model == "cnn_mnist"].model_weights_sha256) == {"rebuilt"}


def test_zero_gridpg_grids_are_recorded_as_zero_grids(tiny_suite, tmp_path, monkeypatch):
    from faithbench.metrics import gridpg
    from faithbench.metrics.grids import GridSelection

    def nothing(*args, **kwargs):
        import torch

        return GridSelection(indices=torch.zeros(0, 9, dtype=torch.long), n_candidates=0, n_dropped=0)

    monkeypatch.setattr(gridpg, "select_grids", nothing)
    out = tmp_path / "nogrids"
    code = main(
        ["run", "--suite", str(tiny_suite), "--out", str(out), "--no-progress", "--metrics", "gridpg,gini"]
        + ["--models", "cnn_mnist", "--methods", "gradient"]
    )
    assert code == 0
    results = pd.read_csv(out / "results.csv").set_index("metric")
    assert results.loc["gridpg", "n"] == 0 and np.isnan(results.loc["gridpg", "mean"])
    assert json.loads(results.loc["gridpg", "params"])["n_grids"] == 0
    assert results.loc["gini", "n"] == 6


CONTROLLED = """
name = "controlled"
dataset = "mnist"
controls = true
models = ["cnn_mnist"]
methods = ["gradient", "input_x_gradient", "gradcam"]
metrics = ["gridpg", "pixel_deletion", "entropy", "randomisation"]
n_samples = 6
batch_size = 8

[gridpg]
preset = "bcos-v2"
n_grids = 2

[randomisation]
n_samples = 3
n_depths = 2
"""


def test_controls_run_when_asked_for_and_the_report_scores_skill_agreement_and_randomisation(tmp_path):
    suite = tmp_path / "controlled.toml"
    suite.write_text(CONTROLLED)
    out = tmp_path / "run"
    assert main(["run", "--suite", str(suite), "--out", str(out), "--no-progress"]) == 0
    results = pd.read_csv(out / "results.csv")
    assert {"random", "uniform", "centre", "edges", "oracle"} <= set(results["method"])
    assert set(results.loc[results["method"] == "oracle", "metric"]) == {"gridpg"}  # the only ground truth here
    skill = pd.read_csv(out / "report" / "skill.csv").set_index(["metric", "method"])
    assert skill.loc[("gridpg", "oracle"), "skill"] == pytest.approx(1.0)
    assert skill.loc[("gridpg", "random"), "skill"] == 0.0
    randomised = results[results["metric"] == "randomisation"].set_index("method")["mean"]
    assert randomised["edges"] == pytest.approx(1.0) and randomised["gradient"] < 0.9
    md = (out / "report" / "leaderboard.md").read_text()
    assert "### Skill over the controls" in md and "### Metric agreement" in md and "### Metric reliability" in md
    for name in ("metric_agreement.png", "rank_intervals_cnn_mnist.png", "curves_cnn_mnist.png", "randomisation.png"):
        assert (out / "report" / name).stat().st_size > 100, name


def test_rescore_replays_the_stored_maps_exactly_and_reports_flips(tmp_path, capsys):
    suite = tmp_path / "controlled.toml"
    suite.write_text(CONTROLLED)
    out = tmp_path / "run"
    assert main(["run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report"]) == 0
    stored = sorted(p.name for p in (out / "maps").glob("*.pt"))  # the model-free controls are recomputed, not stored
    methods = ["gradcam", "gradient", "input_x_gradient", "other_class", "randomised_model", "shuffled"]
    assert stored == [f"cnn_mnist__{m}.pt" for m in methods]  # the corruption controls ask the model: stored
    base = pd.read_csv(out / "results.csv").set_index(["method", "metric"])

    from faithbench.bench.run import rescoring as rescore_module

    calls = []
    original = rescore_module.get_method

    def counting(name, **params):  # the replay must never run a method that asks the model (controls are redone)
        method = original(name, **params)
        if not method.capabilities.model_free:
            method._attribute = lambda *a, **k: calls.append(name)
        return method

    rescore_module.get_method = counting
    try:
        same, flips, notes = rescore_module.rescore(out, {}, tmp_path / "same")
    finally:
        rescore_module.get_method = original
    assert not calls and not notes
    same = same.set_index(["method", "metric"])
    pd.testing.assert_series_equal(same["mean"], base.loc[same.index, "mean"])  # exactly the run's scores
    assert (flips["n_flipped_pairs"] == 0).all()

    assert main(["rescore", str(out), "--set", "gridpg.smooth=1", "--set", "deletion.baseline=blur",
                 "--set", "gridpg.n_grids=3", "--no-progress"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "rankings that changed" in text and "left out: cnn_mnist / gradient / gridpg" in text  # a third grid
    folder = out / "rescored" / "deletion.baseline=blur,gridpg.n_grids=3,gridpg.smooth=1"
    again = pd.read_csv(folder / "results.csv").set_index(["method", "metric"])
    assert set(again.xs("gridpg", level="metric").index) == set(CONTROLS)  # the controls need no stored maps
    moved = again.loc[("gradient", "pixel_deletion"), "mean"] != base.loc[("gradient", "pixel_deletion"), "mean"]
    assert moved and again.loc[("gradient", "entropy"), "mean"] == base.loc[("gradient", "entropy"), "mean"]
    smooth = rescore_module.rescore(out, {"gridpg": {"smooth": 1}}, tmp_path / "smooth")[0].set_index(
        ["method", "metric"]
    )
    assert smooth.loc[("gradient", "gridpg"), "mean"] != base.loc[("gradient", "gridpg"), "mean"]
    assert smooth.loc[("oracle", "gridpg"), "mean"] == 100.0  # unsmoothed, the ground truth scores exactly 1


def test_rows_say_which_are_reruns_and_controls_in_columns(tiny_suite, tmp_path):
    """Reruns and controls are data (rerun_of, rerun_seed, is_control), not a method name to parse."""
    out = tmp_path / "reruns"
    suite = with_overrides(load_suite(str(tiny_suite)), models=["cnn_mnist"], methods=["gradient"],
                           metrics=["entropy"], controls=["random"], rerun_seeds=[1])  # fmt: skip
    assert [job.name for job in jobs(suite)] == ["gradient", "random", "random@seed1"]
    runner.run(suite, out, device="cpu", progress=False)
    for name in ("results.csv", "samples.csv"):
        frame = pd.read_csv(out / name).drop_duplicates("method").set_index("method")
        assert frame.loc["random@seed1", "rerun_of"] == "random" and frame.loc["random@seed1", "rerun_seed"] == 1
        assert frame.loc["random", "is_control"] and frame.loc["random@seed1", "is_control"]
        assert (
            not frame.loc["gradient", "is_control"] and frame.loc["gradient", ["rerun_of", "rerun_seed"]].isna().all()
        )
    units = [json.loads(p.read_text()) for p in (out / "units").glob("*.json")]
    rerun = next(u for u in units if u["method"] == "random@seed1")
    assert (rerun["rerun_of"], rerun["rerun_seed"], rerun["is_control"], rerun["method_name"]) == (
        "random",
        1,
        True,
        "random",
    )


def test_files_written_before_the_job_columns_get_them_from_the_method_names():
    from faithbench.bench.store.results import contestants, first_runs, with_job_columns

    old = pd.DataFrame({"model": "m", "method": ["lime", "lime@seed1", "random", "oracle"], "mean": [1.0, 2, 3, 4]})
    frame = with_job_columns(old)
    assert frame["rerun_of"].isna().tolist() == [True, False, True, True] and frame["rerun_of"][1] == "lime"
    assert frame["rerun_seed"][1] == 1
    assert frame["is_control"].tolist() == [False, False, True, True]
    assert first_runs(frame)["method"].tolist() == ["lime", "random", "oracle"]
    assert contestants(frame)["method"].tolist() == ["lime"]
    assert with_job_columns(frame) is frame  # a current file is read as it is


def test_unit_and_metric_spec_take_keywords_only():
    from faithbench.metrics.spec import MetricSpec, Unit

    with pytest.raises(TypeError):
        MetricSpec("x", "y", True, ("image",), 1, "", None)
    import torch

    with pytest.raises(TypeError):
        Unit(None, None, torch.zeros(1), torch.zeros(1), torch.zeros(1), 1, torch.device("cpu"))
