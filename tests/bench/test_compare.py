"""``compare`` as a CI gate: what it must refuse, what it reports, and its one-line user errors.

The runs are cut from the committed smoke reference (results.csv, samples.csv, run.json), so no suite
is run here.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.report.gate import compare
from faithbench.bench.run.suite import build_suite

REF = Path(__file__).resolve().parents[2] / "results" / "reference" / "smoke"
CI = ["--two-sided", "--tolerance", "1e-6", "--rel-tolerance", "1e-3"]  # .ci/run's flags
MODELS, METHODS = {"cnn_mnist", "bcos_cnn_mnist"}, {"native", "gradient", "lime"}


def _write(folder: Path, results: pd.DataFrame, samples: pd.DataFrame | None = None, run: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    results.to_csv(folder / "results.csv", index=False)
    if samples is not None:
        samples.to_csv(folder / "samples.csv", index=False)
    if run is not None:
        (folder / "run.json").write_text(json.dumps(run, indent=2))
    return folder / "results.csv"


@pytest.fixture(scope="module")
def parts() -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A small cut of the smoke reference: two models x three methods x every metric."""
    res, smp = pd.read_csv(REF / "results.csv"), pd.read_csv(REF / "samples.csv")
    res = res[res.model.isin(MODELS) & res.method.isin(METHODS)].reset_index(drop=True)
    smp = smp[smp.model.isin(MODELS) & smp.method.isin(METHODS)].reset_index(drop=True)
    return res, smp, json.loads((REF / "run.json").read_text())


@pytest.fixture
def base(parts, tmp_path) -> Path:
    res, smp, run = parts
    return _write(tmp_path / "base", res, smp, run)


def _new(parts, tmp_path, results=None, samples=None, run=None) -> Path:
    res, smp, rec = parts
    return _write(
        tmp_path / "new",
        res.copy() if results is None else results,
        smp.copy() if samples is None else samples,
        json.loads(json.dumps(rec)) if run is None else run,
    )


def _gate(capsys, base: Path, new: Path, *flags: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["compare", str(base), str(new), *CI, *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def _accuracy_rows() -> int:
    """The reference's models with a held-out accuracy in run.json: ``compare`` gates each as one more row."""
    models = json.loads((REF / "run.json").read_text())["models"]
    return sum("run_accuracy" in m for m in models.values())


def _gridpg(frame: pd.DataFrame) -> pd.Series:
    return frame.metric == "gridpg"


# ----------------------------------------------------------------------------- what passes


def test_ci_command_passes_on_the_committed_reference_against_itself(capsys):
    ref = str(REF / "results.csv")
    assert main(["compare", ref, ref, *CI]) == 0
    out = capsys.readouterr().out
    rows = len(pd.read_csv(ref))  # every row of the reference (1700: 16 smoke metrics and the single-deletion pair)
    rows += _accuracy_rows()  # and each model's held-out accuracy row
    assert rows >= 1700 and f"OK: {rows} rows within tolerance" in out and "What differs" not in out


def test_identical_cut_passes_with_confidence_intervals(parts, base, tmp_path):
    table, failed = compare(base, _new(parts, tmp_path), tolerance=1e-6, rel_tolerance=1e-3, two_sided=True)
    assert not failed and set(table.status) == {"ok"} and table.attrs["differences"] == []
    assert table.delta_ci_low.notna().any()


def test_a_max_batch_difference_does_not_fail(parts, base, tmp_path, capsys):
    res = parts[0].copy()
    res["params"] = [json.dumps({**json.loads(p), "max_batch": 16}, sort_keys=True) for p in res.params]
    res["model_calls"] *= 4  # the cost columns move with it; the scores do not
    run = json.loads(json.dumps(parts[2]))
    run["suite"]["max_batch"] = 16
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res, run=run))
    assert code == 0, out
    assert "PROTOCOL" not in out


def test_a_method_parameter_that_only_batches_does_not_fail(parts, base, tmp_path, capsys):
    """A parameter the row names cost-only (``cost_params``: the method's, e.g. IntegratedGradients'
    internal_batch_size, or a plugin method's own) changes its rows per pass, not its maps: against a reference
    written before rows named them too; the same parameter not named, or another, fails the gate."""

    def with_params(cost: list[str] | None = None, **method_params):
        res = parts[0].copy()
        res["params"] = [
            json.dumps(
                {
                    **json.loads(p),
                    "method_params": {**json.loads(p).get("method_params", {}), **method_params},
                    **({"cost_params": cost} if cost is not None else {}),
                }
            )  # fmt: skip
            for p in res.params
        ]
        return res

    for name, value in (("internal_batch_size", 8), ("rows_per_pass", 3)):
        code, out, _ = _gate(capsys, base, _new(parts, tmp_path / name, results=with_params([name], **{name: value})))
        assert code == 0 and "PROTOCOL" not in out, out
        code, out, _ = _gate(capsys, base, _new(parts, tmp_path / f"{name}-", results=with_params(**{name: value})))
        assert code != 0 and f"params.method_params.{name}" in out, out
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path / "other", results=with_params(["rows"], n_steps=7)))
    assert code != 0 and "params.method_params.n_steps" in out, out


def test_a_method_declares_the_parameters_that_only_batch_and_the_resume_key_leaves_them_out():
    from faithbench.attributions import get_method
    from faithbench.bench.run.plan import resolve

    ig = get_method("integrated_gradients")
    assert ig.cost_params == {"internal_batch_size"} and "internal_batch_size" not in ig.protocol_params
    settings = {"name": "k", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["integrated_gradients"],
                "metrics": ["pixel_deletion"], "n_samples": 4, "controls": False}  # fmt: skip

    def key(**ig_params):
        return resolve(build_suite({**settings, "method_params": {"integrated_gradients": ig_params}}, "t")).keys

    assert key(internal_batch_size=8) == key() != key(n_steps=7)


def test_a_renamed_suite_alone_is_reported_not_failing(parts, base, tmp_path, capsys):
    res = parts[0].assign(suite="smoke2")
    run = json.loads(json.dumps(parts[2]))
    run["suite"]["name"] = "smoke2"
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res, run=run))
    assert code == 0, out
    assert "suites differ: smoke (baseline) vs smoke2 (new)" in out


def test_other_model_weights_are_reported_but_do_not_fail(parts, base, tmp_path, capsys):
    res = parts[0].copy()
    res.loc[res.model == "cnn_mnist", "model_weights_sha256"] = "0123456789abcdef" * 4
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res))
    assert code == 0, out
    head = out.split("\nmodel ")[0]  # before the score table
    assert "model weights differ for cnn_mnist (dda5df1c → 01234567)" in head
    assert "different weights" in head and "bcos_cnn_mnist (" not in head


# ----------------------------------------------------------------------------- rows on one side, duplicates


def test_an_added_row_fails_unless_new_rows_are_allowed(parts, base, tmp_path, capsys):
    res = parts[0]
    extra = res[_gridpg(res) & (res.model == "cnn_mnist") & (res.method == "gradient")].assign(method="deeplift")
    new = _new(parts, tmp_path, results=pd.concat([res, extra], ignore_index=True))
    code, out, _ = _gate(capsys, base, new)
    assert code == 1
    assert "1 row only in the new run (NEW: --allow-new-rows accepts them)" in out
    assert "FAIL: 1 row(s) NEW" in out
    code, out, _ = _gate(capsys, base, new, "--allow-new-rows")
    assert code == 0, out
    assert f"OK: {len(res) + _accuracy_rows()} rows within tolerance" in out
    assert "1 new row(s) accepted (--allow-new-rows)" in out
    # A row only in the baseline still fails, whatever the option.
    assert _gate(capsys, new, base, "--allow-new-rows")[0] == 1


@pytest.mark.parametrize("side", ["baseline", "new"])
def test_a_duplicated_row_is_one_error_line(parts, base, tmp_path, capsys, side):
    res = parts[0]
    dup = pd.concat([res, res[(res.model == "cnn_mnist") & (res.method == "gradient") & (res.metric == "gini")]])
    new = _new(parts, tmp_path, results=dup)
    code, _, err = _gate(capsys, *((new, base) if side == "baseline" else (base, new)))
    assert code == 2 and err.count("\n") == 1
    what = "has 1 duplicated (model, method, metric) row: cnn_mnist / gradient / gini"
    assert err.startswith(f"error: {side} {new} {what}")


def test_removed_count_columns_are_one_error_line(parts, base, tmp_path, capsys):
    new = _new(parts, tmp_path, results=parts[0].drop(columns=["n", "n_undefined", "n_dropped"]))
    code, _, err = _gate(capsys, base, new)
    assert code == 2 and err.count("\n") == 1
    assert f"new {new} lacks the column(s) n, n_undefined, n_dropped" in err


# ----------------------------------------------------------------------------- protocol


def test_a_changed_gridpg_preset_with_the_same_scores_fails_as_protocol(parts, base, tmp_path, capsys):
    res = parts[0].copy()
    hit = _gridpg(res)
    res.loc[hit, "params"] = [json.dumps({**json.loads(p), "preset": "aloe"}, sort_keys=True) for p in res.params[hit]]
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res))
    assert code == 1
    head = out.split("\nmodel ")[0]
    assert f"protocol differs on {int(hit.sum())} rows" in head and "params.preset" in head
    assert "params.preset 'bcos-v2' → 'aloe'" in head
    assert f"FAIL: {int(hit.sum())} row(s) PROTOCOL" in out
    table, failed = compare(base, tmp_path / "new" / "results.csv", two_sided=True, rel_tolerance=1e-3)
    assert failed and set(table.status[table.metric == "gridpg"]) == {"PROTOCOL"}
    assert table.delta_ci_low[table.status == "PROTOCOL"].isna().all()  # no CI across protocols
    assert table.delta_ci_low[table.status == "ok"].notna().any()


def test_another_seed_or_direction_is_protocol(parts, base, tmp_path):
    res = parts[0].copy()
    res.loc[res.metric == "gini", "seed"] = 1
    res.loc[res.metric == "entropy", "higher_is_better"] = True
    _new(parts, tmp_path, results=res)
    table, failed = compare(base, tmp_path / "new" / "results.csv")
    assert failed
    assert set(table.metric[table.status == "PROTOCOL"]) == {"gini", "entropy"}
    assert set(table.detail[table.metric == "gini"]) == {"seed"}


def test_unrelated_suites_name_the_difference_before_any_score(parts, base, tmp_path, capsys):
    """The vision suite against the smoke reference: other suite, other samples, other budgets."""
    res, smp, run = parts[0].copy(), parts[1].copy(), json.loads(json.dumps(parts[2]))
    res["suite"] = "vision"
    run["suite"].update(name="vision", n_samples=48, batch_size=64)
    run["suite"]["gridpg"]["n_grids"] = 12
    res["n"] = res["n"] * 3
    res["mean"] = res["mean"] + 1.0
    hit = _gridpg(res)
    res.loc[hit, "params"] = [json.dumps({**json.loads(p), "n_grids": 12}, sort_keys=True) for p in res.params[hit]]
    res = res[res.method != "lime"]  # rows on one side only, too
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res, samples=smp, run=run))
    assert code == 1
    head, _, rest = out.partition("\nmodel ")
    assert "suites differ: smoke (baseline) vs vision (new)" in head
    assert "suite settings differ: n_samples 16 → 48: every common row is PROTOCOL" in head
    assert "cost settings differ: batch_size 16 → 64 (reported only" in head
    assert "[gridpg].n_grids 4 → 12" in head and "rows only in the baseline (MISSING)" in head
    assert "COUNTS" not in rest and "REGRESSED" not in rest
    assert "the runs are of different suites (smoke vs vision)" in out.splitlines()[-1]
    assert "FAIL:" in out.splitlines()[-1] and "MISSING, PROTOCOL" in out.splitlines()[-1]
    table, _ = compare(base, tmp_path / "new" / "results.csv")
    assert table.delta_ci_low.isna().all()


@pytest.mark.parametrize(("shift", "fails"), [(5e-5, False), (3e-4, True)])
def test_a_completeness_gap_moved_by_float_rounding_passes_and_more_fails(parts, base, tmp_path, capsys, shift, fails):
    """completeness_gap's float floor (1e-4 percentage points) is the gate's allowance for it, whatever the flags."""
    res = parts[0].copy()
    gap = res.metric == "completeness_gap"
    assert gap.any() and (res.loc[gap, "mean"].abs() * 1e-3 < shift).all()  # beyond both of CI's tolerances
    res.loc[gap, "mean"] += shift
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res))
    assert code == int(fails)
    assert ("CHANGED" in out or "REGRESSED" in out) == fails


def test_the_float_floor_is_the_metrics_own(parts, base, tmp_path, capsys):
    """A metric without a float floor fails on the shift completeness_gap's floor allows."""
    res = parts[0].copy()
    res.loc[_gridpg(res), "mean"] += 5e-5 + 1e-3 * res.loc[_gridpg(res), "mean"].abs()
    code, out, _ = _gate(capsys, base, _new(parts, tmp_path, results=res))
    assert code == 1 and "gridpg" in out


# ----------------------------------------------------------------------------- one-line user errors


@pytest.mark.parametrize(
    "flags", [["--tolerance", "nan"], ["--tolerance", "-1"], ["--rel-tolerance", "inf"], ["--rel-tolerance", "-0.1"]]
)
def test_tolerances_must_be_finite_and_non_negative(base, capsys, flags):
    capsys.readouterr()
    assert main(["compare", str(base), str(base), "--two-sided", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flags[0]} must be a finite number >= 0, got {flags[1]}" in err


def test_tolerance_nan_no_longer_hides_a_regression(parts, base, tmp_path, capsys):
    res = parts[0].copy()
    res.loc[_gridpg(res), "mean"] -= 50.0
    new = _new(parts, tmp_path, results=res)
    assert _gate(capsys, base, new)[0] == 1
    capsys.readouterr()
    assert main(["compare", str(base), str(new), "--two-sided", "--tolerance", "nan"]) == 2


@pytest.mark.parametrize("side", ["baseline", "new"])
def test_a_header_only_file_is_one_error_line(parts, base, tmp_path, capsys, side):
    new = _new(parts, tmp_path, results=parts[0].iloc[:0])
    code, _, err = _gate(capsys, *((new, base) if side == "baseline" else (base, new)))
    assert code == 2 and err.count("\n") == 1
    assert f"error: {side} {new} has no result rows" in err


def test_a_non_numeric_score_is_one_error_line(parts, base, tmp_path, capsys):
    res = parts[0].astype({"mean": object})
    res.loc[0, "mean"] = "12,5"
    new = _new(parts, tmp_path, results=res)
    code, _, err = _gate(capsys, base, new)
    assert code == 2 and err.count("\n") == 1
    key = " / ".join(res.loc[0, ["model", "method", "metric"]])
    assert f"new {new}: column mean holds a non-numeric value '12,5' (row {key})" in err


def test_an_unreadable_samples_file_is_one_error_line(parts, base, tmp_path, capsys):
    new = _new(parts, tmp_path)
    lines = ["model,method,metric,sample_id,value", "cnn_mnist,gradient,gini,0,0.5", "cnn_mnist,gradient,gini,1,5,2,3"]
    (new.parent / "samples.csv").write_text("\n".join(lines) + "\n")  # a truncated, interleaved write
    code, _, err = _gate(capsys, base, new)
    assert code == 2 and err.count("\n") == 1
    assert f"new samples file {new.parent / 'samples.csv'} is not readable (ParserError" in err


def test_a_missing_run_record_or_samples_file_only_drops_what_it_gives(parts, base, tmp_path, capsys):
    new = _new(parts, tmp_path)
    (new.parent / "run.json").unlink()
    shutil.copy(new, tmp_path / "alone.csv")  # no samples.csv, no run.json beside it
    code, out, _ = _gate(capsys, base, tmp_path / "alone.csv")
    assert code == 0, out
    assert "the suites' settings are not compared" in out
    table, _ = compare(base, tmp_path / "alone.csv")
    # consistency is undefined on every image for the gradient (no two maps share their largest pixel): NaN both sides
    defined = np.isfinite(table.mean_base)
    assert (~defined).any() and table.status[~defined].eq("ok").all()
    assert table.delta_ci_low.isna().all() and np.isfinite(table.delta[defined]).all()
