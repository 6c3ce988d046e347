"""``compare``'s defaults tell float noise from regressions, and a collapsed model fails by name.

The runs are cut from the committed smoke reference (as in test_compare); the noise sizes are the measured ones
(another ``--pieces``, ``--batch-size``, ``--max-batch``, another CPU type's rounding)."""
# ruff: noqa: F811 (the fixtures of test_compare, taken as parameters)

import json

import numpy as np
import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.report.gate import compare
from tests.bench.test_compare import _new, base, parts  # noqa: F401 (fixtures)


def _run(capsys, base_csv, new_csv, *flags: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["compare", str(base_csv), str(new_csv), *flags])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("two_sided", [False, True])
def test_the_defaults_pass_float_noise_that_a_zero_tolerance_fails(parts, base, tmp_path, capsys, two_sided):
    res, smp, _ = parts
    noisy, noisy_samples = res.copy(), smp.copy()
    rng = np.random.default_rng(0)
    # 1.6e-7 relative (another CPU type) and 1e-8 absolute (two pieces' float sums), either sign
    noisy["mean"] = noisy["mean"] * (1 + rng.choice([-1.6e-7, 1.6e-7], len(noisy))) - 1e-8
    noisy_samples["value"] = noisy_samples["value"] * (1 - 1.6e-7)
    new = _new(parts, tmp_path, results=noisy, samples=noisy_samples)
    flags = ["--two-sided"] if two_sided else []
    code, out = _run(capsys, base, new, *flags)
    assert code == 0, out[-2000:]
    assert "OK:" in out.splitlines()[-1] and "relative 0.001" in out.splitlines()[-1]
    code, out = _run(capsys, base, new, "--tolerance", "0", "--rel-tolerance", "0", *flags)
    assert code == 1
    # the failing delta is printed with the digits that explain it, never as -0.0000
    failing = [x for x in out.splitlines() if ("REGRESSED" in x or "CHANGED" in x) and not x.startswith("FAIL")]
    deltas = [line.split()[5] for line in failing]  # model, method, metric, mean_base, mean_new, delta
    assert deltas and all(float(d) != 0 and "0.0000" not in d for d in deltas), deltas[:5]


def test_a_regression_beyond_the_relative_default_fails(parts, base, tmp_path, capsys):
    res = parts[0].copy()
    hit = (res.metric == "gridpg") & (res.method == "native") & (res.model == "bcos_cnn_mnist")
    res.loc[hit, "mean"] = res.loc[hit, "mean"] * 0.995  # half a percent worse
    code, out = _run(capsys, base, _new(parts, tmp_path, results=res))
    assert code == 1 and "REGRESSED" in out.splitlines()[-1]


def test_the_default_absolute_tolerance_is_a_fraction_of_the_unit_scale(parts, base, tmp_path):
    table, _ = compare(base, _new(parts, tmp_path), rel_tolerance=0.0)
    rows = table[table.method != "(model)"]
    percent = rows[rows.metric.isin(["gridpg", "road", "comprehensiveness", "sufficiency"])]
    unit = rows[rows.metric.isin(["pixel_deletion", "srg", "lerf", "morf", "gini"])]
    assert len(percent) and len(unit)
    assert np.allclose(percent["allowed"], 1e-4) and np.allclose(unit["allowed"], 1e-6)
    table, _ = compare(base, _new(parts, tmp_path))  # the relative default, 1e-3 of the baseline, where larger
    assert (table["allowed"] >= 1e-3 * table["mean_base"].abs().fillna(0) - 1e-12).all()


def test_batch_size_is_a_cost_setting_not_protocol(parts, base, tmp_path, capsys):
    run = json.loads(json.dumps(parts[2]))
    run["suite"].update(batch_size=5, max_batch=7, pieces=2)
    code, out = _run(capsys, base, _new(parts, tmp_path, run=run), "--two-sided")
    assert code == 0, out[-1500:]
    assert "cost settings differ: batch_size 16 → 5, max_batch" in out and "PROTOCOL" not in out


def _with_accuracy(run: dict, correct: int, n: int = 512, chance: float = 0.113) -> dict:
    run = json.loads(json.dumps(run))
    record = {"correct": correct, "n": n, "chance": chance, "data": "mnist-5k-test"}
    run.setdefault("models", {}).setdefault("cnn_mnist", {})["run_accuracy"] = record
    return run


@pytest.mark.parametrize(
    ("correct", "fails", "why"),
    [(436, False, ""), (0, True, "not above the floor"), (400, True, "fell 7.0 points"), (420, False, "")],
)
def test_a_collapsed_or_degraded_model_fails_as_accuracy(parts, base, tmp_path, capsys, correct, fails, why):
    """85.2 % in the baseline; 0 % (collapsed) and a 7-point drop fail by name, a 3-point drop passes."""
    base_run = _with_accuracy(parts[2], 436)
    (base.parent / "run.json").write_text(json.dumps(base_run))
    new = _new(parts, tmp_path, run=_with_accuracy(parts[2], correct))
    code, out = _run(capsys, base, new)
    assert code == int(fails), out[-1500:]
    if fails:
        line = next(x for x in out.splitlines() if x.startswith("ACCURACY cnn_mnist"))
        assert f"85.2 % -> {100 * correct / 512:.1f} %" in line and why in line


def test_an_explicit_floor_fails_a_model_below_it(parts, base, tmp_path, capsys):
    base_run = json.loads(json.dumps(parts[2]))
    for record in base_run.get("models", {}).values():
        record.pop("run_accuracy", None)  # a baseline that records no accuracy
    (base.parent / "run.json").write_text(json.dumps(base_run))
    new = _new(parts, tmp_path, run=_with_accuracy(parts[2], 436))
    assert _run(capsys, base, new)[0] == 0  # no baseline accuracy: only the floor applies, chance's by default
    code, out = _run(capsys, base, new, "--accuracy-floor", "90")
    assert code == 1 and "ACCURACY cnn_mnist: ? -> 85.2 %" in out


def test_a_row_without_an_interval_says_why(parts, base, tmp_path, capsys):
    smp = parts[1]
    one = smp[(smp.metric == "gridpg") & (smp.method == "native") & (smp.model == "bcos_cnn_mnist")].head(1)
    rest = smp[~((smp.metric == "gridpg") & (smp.method == "native") & (smp.model == "bcos_cnn_mnist"))]
    table, _ = compare(base, _new(parts, tmp_path, samples=pd.concat([rest, one])))
    row = table[(table.metric == "gridpg") & (table.method == "native") & (table.model == "bcos_cnn_mnist")].iloc[0]
    assert np.isnan(row.delta_ci_low) and row.n_paired == 1
    assert "no interval: 1 sample scored in both runs" in row.detail
    (tmp_path / "new" / "samples.csv").unlink()
    table, _ = compare(base, tmp_path / "new" / "results.csv")
    assert any("no per-sample scores (samples.csv) beside the new run" in d for d in table.attrs["differences"])
