"""The dry run's time, scaled from a finished slice of the suite: per unit s * work_full / work_slice by model inputs
and by model calls, their mean; a unit the slice's model refused 0 s, one the slice lacks at its method's (else its
model's) median rate there; what is not counted said."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.estimate.counts import estimate
from faithbench.bench.estimate.slice_time import time_from_slice, unit_work
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UserError
from faithbench.progress import clock_text

SUITE = {"name": "s", "models": ["cnn_mnist", "bcos_cnn_mnist"], "metrics": ["pixel_deletion", "entropy"]}


def _slice(folder, methods, n_samples, seconds, models=SUITE["models"]):
    """A finished slice's folder, as a run writes it: run.json's suite and one results row per (unit, metric)."""
    suite = build_suite({**SUITE, "models": models, "methods": methods, "n_samples": n_samples})
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps({"suite": suite.to_dict()}))
    rows = [{"model": m, "method": j, "metric": k, "mean": 0.5, "piece_time_s": s, "pieces": 1, "device": "cpu"}
            for (m, j), s in seconds.items() for k in SUITE["metrics"]]  # fmt: skip
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    return suite


def test_a_unit_is_its_slice_time_scaled_by_its_estimated_inputs_and_calls(tmp_path):
    seconds = {("cnn_mnist", "gradient"): 2.0, ("cnn_mnist", "random"): 0.5}
    sliced = _slice(tmp_path / "slice", ["gradient"], 4, seconds)  # bcos_cnn_mnist planned, no rows: refused
    full = build_suite({**SUITE, "methods": ["gradient", "input_x_gradient"], "n_samples": 12, "batch_size": 8})
    est = time_from_slice(full, tmp_path / "slice").units.set_index(["model", "method"])
    before = unit_work(estimate(resolve(sliced))).set_index(["model", "method"])
    after = unit_work(estimate(resolve(full))).set_index(["model", "method"])
    unit = ("cnn_mnist", "gradient")
    # deletion on n samples: n explanations and 11 perturbed inputs each: three times the samples, three times the
    # inputs; calls: 1 + 1 of 4 samples at batch 64, 2 + 1 of 12 at batch 8 (132 perturbed inputs, up to 256 a call)
    assert after.loc[unit, "inputs"] == 3 * before.loc[unit, "inputs"]
    assert (before.loc[unit, "calls"], after.loc[unit, "calls"]) == (2, 3)
    row = est.loc[unit]
    assert (row["inputs"], row["calls"], row["seconds"], row["basis"]) == pytest.approx((6.0, 3.0, 4.5, "slice"))
    refused = est.loc[("bcos_cnn_mnist", "gradient")]
    assert (refused["seconds"], refused["basis"]) == (0.0, "refused")
    # input x gradient is not in the slice's plan: its inputs at the model's median rate there (gradient's)
    rate = 2.0 / before.loc[unit, "inputs"]
    row = est.loc[("cnn_mnist", "input_x_gradient")]
    assert row["basis"] == "model"
    assert row["seconds"] == pytest.approx(rate * after.loc[("cnn_mnist", "input_x_gradient"), "inputs"])


def test_a_method_on_another_model_borrows_the_methods_rate(tmp_path):
    _slice(tmp_path / "slice", ["gradient"], 4, {("cnn_mnist", "gradient"): 2.0}, models=["cnn_mnist"])
    full = build_suite({**SUITE, "methods": ["gradient"], "n_samples": 4})
    est = time_from_slice(full, tmp_path / "slice").units.set_index(["model", "method"])
    assert est.loc[("bcos_cnn_mnist", "gradient"), "basis"] == "method"
    assert est.loc[("cnn_mnist", "gradient"), "seconds"] == pytest.approx(2.0)  # the same plan: the same time
    assert clock_text(3725.4) == "1:02:05"


def test_the_dry_run_prints_the_time_and_refuses_it_without_a_dry_run(tmp_path, capsys):
    _slice(tmp_path / "slice", ["gradient"], 4, {("cnn_mnist", "gradient"): 2.0, ("bcos_cnn_mnist", "gradient"): 3.0})
    args = ["run", "--models", "cnn_mnist,bcos_cnn_mnist", "--methods", "gradient",
            "--metrics", "pixel_deletion,entropy", "--n-samples", "8", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main([*args, "--dry-run", "--times-from", str(tmp_path / "slice")]) == 0
    out = capsys.readouterr().out
    # 8 samples instead of 4: twice the inputs, the same calls (one explanation and one perturbation call each)
    assert "time ≈ 0:00:08 of compute on cpu (one worker; 0:00:05 if it goes with the model calls, 0:00:10 if" in out
    assert "cnn_mnist 0:00:03, bcos_cnn_mnist 0:00:04" in out
    assert "not counted: loading the models" in out
    assert main([*args, "--times-from", str(tmp_path / "slice")]) == 2
    assert "--times-from times a plan: it goes with --dry-run" in capsys.readouterr().err
    with pytest.raises(UserError, match="no run.json there"):
        time_from_slice(build_suite({**SUITE, "methods": ["gradient"]}), tmp_path)


def test_a_cpu_slice_gives_no_time_for_a_gpu_plan_and_a_plan_without_a_slice_says_so(tmp_path, capsys):
    _slice(tmp_path / "slice", ["gradient"], 4, {("cnn_mnist", "gradient"): 2.0, ("bcos_cnn_mnist", "gradient"): 3.0})
    args = ["run", "--models", "cnn_mnist,bcos_cnn_mnist", "--methods", "gradient", "--metrics", "entropy",
            "--out", str(tmp_path / "out"), "--dry-run", "--device", "cuda"]  # fmt: skip
    assert main([*args, "--times-from", str(tmp_path / "slice")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"time: none for cuda: the slice in {tmp_path / 'slice'} ran on cpu, and its seconds say nothing" in out
    assert "time ≈" not in out and "time ≥" not in out
    assert main(args) == 0
    assert "time: none for cuda (counts are not seconds): pass --times-from a slice" in " ".join(
        capsys.readouterr().out.split()
    )


def test_a_total_that_leaves_units_out_is_a_lower_bound(tmp_path, capsys):
    _slice(tmp_path / "slice", ["random"], 4, {("cnn_mnist", "random"): 2.0}, models=["cnn_mnist"])
    args = ["run", "--models", "cnn_mnist,bcos_cnn_mnist", "--methods", "gradient", "--metrics", "entropy",
            "--no-controls", "--out", str(tmp_path / "out"), "--dry-run"]  # fmt: skip
    assert main([*args, "--times-from", str(tmp_path / "slice")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # cnn_mnist's gradient borrows its model's rate there; bcos_cnn_mnist has none: left out, so the total is a bound
    assert re.search(r"time ≥ 0:00:\d\d \(a lower bound: 1 of 2 units have no basis there\) of compute on cpu", out)
    assert "1 unit(s) with no basis in that run (not counted): bcos_cnn_mnist/gradient" in out
