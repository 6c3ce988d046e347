"""The papers' claims as data: the verdict rule, the paired intervals, eligibility, the shipped claims file and the
``verdicts`` command on committed results."""

import json
import shutil
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from faithbench.bench.cli import main
from faithbench.bench.cli.verdicts import record_locality, run_locality
from faithbench.bench.report.claim_verdicts import (
    RunData,
    accuracy_difference,
    combined,
    evaluate_claims,
    one_sample,
    paired_difference,
    verdict,
)
from faithbench.bench.report.paper_claims import CLAIMS_FILE, Row, load_claims
from faithbench.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
T_975_2 = 4.302652729911275  # t quantile, 2 degrees of freedom


@pytest.mark.parametrize(
    ("expect", "low", "high", "expected"),
    [
        ("higher", 0.1, 2.0, "holds"),
        ("higher", -0.1, 2.0, "on par"),
        ("higher", -2.0, -0.1, "fails"),
        ("lower", -2.0, -0.1, "holds"),
        ("lower", 0.1, 2.0, "fails"),
        ("lower", -1.0, 1.0, "on par"),
        ("positive", 0.4, 0.8, "holds"),
        ("negative", -9.8, 2.0, "on par"),  # -3.9 ± 5.9: not negative
        ("on par", -0.1, 0.3, "holds"),
        ("on par", 0.4, 0.8, "fails"),  # +0.6 ± 0.2 is not on par
        ("rising", 0.0, 1.0, "on par"),  # an interval that touches 0 contains it
    ],
)
def test_the_verdict_rule(expect, low, high, expected):
    assert verdict(expect, low, high) == expected


def test_a_trend_holds_only_when_every_step_holds():
    assert combined(["holds", "holds"]) == "holds"
    assert combined(["holds", "on par", "holds"]) == "on par"
    assert combined(["holds", "fails", "on par"]) == "fails"


def _samples(rows: dict[tuple[str, str], list[tuple[int, int, float]]], metric: str = "m") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"model": model, "method": method, "metric": metric, "cluster_id": c, "sample_id": s, "value": v}
            for (model, method), values in rows.items()
            for c, s, v in values
        ]
    )


def test_paired_difference_by_hand():
    # 3 clusters of 2 samples; b's sample 5 is undefined, so a's sample 5 leaves the pairing too.
    a = [(0, 0, 10.0), (0, 1, 12.0), (1, 2, 20.0), (1, 3, 22.0), (2, 4, 30.0), (2, 5, 99.0)]
    b = [(0, 0, 9.0), (0, 1, 9.0), (1, 2, 19.0), (1, 3, 19.0), (2, 4, 26.0), (2, 5, np.nan)]
    samples = _samples({("x", "p"): a, ("y", "q"): b})
    e = paired_difference(samples, Row(model="x", method="p"), Row(model="y", method="q"), "m", 0.95)
    # per-cluster mean differences: (1 + 3) / 2 = 2, (1 + 3) / 2 = 2, 4 -> mean 8/3, sd sqrt(4/3)
    diffs = np.array([2.0, 2.0, 4.0])
    half = T_975_2 * diffs.std(ddof=1) / np.sqrt(3)
    assert e.n == 3 and e.mean == pytest.approx(8 / 3)
    assert (e.low, e.high) == pytest.approx((8 / 3 - half, 8 / 3 + half))
    assert e.a == pytest.approx((11 + 21 + 30) / 3) and e.b == pytest.approx((9 + 19 + 26) / 3)
    one = one_sample(samples, Row(model="y", method="q"), "m", 0.95)
    means = np.array([9.0, 19.0, 26.0])
    assert one.mean == pytest.approx(18.0) and one.high - one.mean == pytest.approx(
        T_975_2 * means.std(ddof=1) / np.sqrt(3)
    )
    lone = _samples({("x", "p"): a[:2], ("y", "q"): b[:2]})
    assert paired_difference(lone, Row(model="x", method="p"), Row(model="y", method="q"), "m", 0.95) is None


def _claims_file(tmp_path: Path, body: str, rules: str = 'locality_metrics = ["m"]\nmin_cell_wins = 0.5\n') -> Path:
    path = tmp_path / "claims.toml"
    path.write_text(f"[rules]\n{rules}\n{body}")
    return path


def _claim(id_: str, kind: str, rows: str, expect: str, metric: str = "m", suite: str = "s") -> str:
    return (
        f'[[claim]]\nid = "{id_}"\npaper = "P"\nsource = "Tab. 1"\nfinding = "f"\npaper_value = "v"\n'
        f'suite = "{suite}"\nmetric = "{metric}"\nkind = "{kind}"\nrows = [{rows}]\nexpect = "{expect}"\n\n'
    )


def _row(model: str, method: str = "native") -> str:
    return f'{{ model = "{model}", method = "{method}" }}'


def test_one_eligibility_rule_and_the_reasons_a_claim_is_not_decided(tmp_path):
    steps = {  # four clusters: b1 -> b2 rises clearly, b2 -> b3 is flat
        ("b1", "native"): [(c, c, 10.0 + c % 2) for c in range(4)],
        ("b2", "native"): [(c, c, 20.0 + c % 2 + (c == 0)) for c in range(4)],
        ("b3", "native"): [(c, c, 20.0 + c % 2 + (c == 1)) for c in range(4)],
        ("other", "native"): [(c, c, 5.0) for c in range(4)],
    }
    samples = pd.concat([_samples(steps), _samples({("b1", "native"): [(c, c, -1.0 - c) for c in range(4)]}, "n")])
    params = {(m, j, "m"): {"pairing": "shared (3 models)"} for m, j in steps}
    params[("other", "native", "m")] = {"pairing": "per-model"}
    params[("b1", "native", "n")] = {}
    run = RunData("s", samples, params, {}, {"b1": 0.9, "b2": 0.8, "b3": 0.29})
    body = (
        _claim("rise", "trend", ", ".join(_row(m) for m in ("b1", "b2", "b3")), "rising")
        + _claim("step", "difference", f"{_row('b2')}, {_row('b1')}", "higher")
        + _claim("local", "difference", f"{_row('b3')}, {_row('b1')}", "higher")
        + _claim("unshared", "difference", f"{_row('b2')}, {_row('other')}", "higher")
        + _claim("missing", "difference", f"{_row('b2')}, {_row('b2', 'lime')}", "higher")
        + _claim("negative", "sign", _row("b1"), "negative", metric="n")
        + _claim("elsewhere", "difference", f"{_row('b2')}, {_row('b1')}", "higher", suite="t")
        + '[[claim]]\nid = "later"\npaper = "P"\nsource = "Tab. 2"\nfinding = "f"\npaper_value = "v"\nsuite = "s"\n'
        'kind = "untested"\nreason = "accuracies are not in the run files"\n'
    )
    rules, claims = load_claims(_claims_file(tmp_path, body))
    table = evaluate_claims(claims, rules, {"s": run}).set_index("id")
    assert table.loc["rise", "verdict"] == "not eligible (b3: cells win 29.0 %)"
    assert table.loc["step", "verdict"] == "holds" and table.loc["step", "n"] == 4
    assert table.loc["step", "here"].startswith("20.8 vs 10.5: +10.2 ± ")
    assert table.loc["local", "verdict"] == "not eligible (b3: cells win 29.0 %)"
    assert table.loc["unshared", "verdict"] == "not eligible (other: no locality check)"
    assert table.loc["missing", "verdict"] == "not run (b2 / lime not in the s run)"
    assert table.loc["negative", "verdict"] == "holds" and table.loc["negative", "here"].startswith("-2.5 ± ")
    assert table.loc["elsewhere", "verdict"] == "not run (no t run given)"
    assert table.loc["later", "verdict"] == "not run (accuracies are not in the run files)"
    # the same claims with every model local: the trend's flat step makes it on par; unshared items are refused
    local = replace(run, locality={"b1": 0.9, "b2": 0.8, "b3": 0.6, "other": 1.0})
    table = evaluate_claims(claims, rules, {"s": local})
    table = table.set_index("id")
    assert table.loc["rise", "verdict"] == "on par" and "; steps +" in table.loc["rise", "here"]
    assert table.loc["unshared", "verdict"] == "not eligible (other's items were chosen per model, not shared)"
    # a metric outside the locality rule needs no check
    ungated, _ = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    table = evaluate_claims(claims, ungated, {"s": replace(run, locality={})}).set_index("id")
    assert table.loc["local", "verdict"] == "holds"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_claim("a", "slope", _row("x"), "higher"), "unknown kind 'slope'; valid: difference, sign, trend"),
        (_claim("a", "difference", _row("x"), "higher"), "compares 2 rows, got 1"),
        (_claim("a", "sign", _row("x"), "higher"), "expects one of positive, negative"),
        (_claim("a", "sign", '{ model = "x" }', "positive"), "a row is"),
        (_claim("a", "sign", _row("x"), "positive") * 2, "repeated: a"),
        ('[[claim]]\nid = "a"\nkind = "untested"\n', "missing key(s) finding, paper, paper_value, reason"),
        ("[[claim]\n", "cannot read the claims file"),
    ],
)
def test_a_malformed_claims_file_is_refused_naming_the_claim(tmp_path, body, message):
    with pytest.raises(UserError, match="claim") as info:
        load_claims(_claims_file(tmp_path, body))
    assert message in str(info.value)


def test_every_shipped_claim_names_rows_its_suite_computes():
    rules, claims = load_claims(CLAIMS_FILE)
    assert len(claims) >= 21 and rules.min_cell_wins == 0.5 and rules.locality_metrics == ("gridpg",)
    for c in claims:
        suite = tomllib.loads((ROOT / "bench" / "suites" / f"{c.suite}.toml").read_text())
        if c.kind == "untested":
            assert c.reason
            continue
        if c.kind in ("accuracy", "recorded"):
            assert set(c.models) <= set(suite["models"]), c.id
            continue
        assert c.metric in suite["metrics"], c.id
        for row in c.rows:
            assert row.model in suite["models"] and row.method in suite["methods"], (c.id, row)


def test_the_command_decides_claims_from_a_committed_run(tmp_path, capsys):
    """smoke-text's reference: SeqPG of W(x)x vs x * gradient, recomputed here from samples.csv by hand."""
    ref = ROOT / "results" / "reference" / "smoke-text"
    body = _claim(
        "seqpg", "difference", f"{_row('bcos_minilm1_rt')}, {_row('minilm1_rt', 'input_x_gradient')}", "higher",
        metric="seqpg", suite="smoke-text",
    )  # fmt: skip
    claims = _claims_file(tmp_path, body, rules="locality_metrics = []\n")
    out = tmp_path / "verdicts"
    assert main(["verdicts", str(ref), "--claims", str(claims), "--out", str(out), "--locality-grids", "0"]) == 0
    row = pd.read_csv(out / "verdicts.csv").iloc[0]
    s = pd.read_csv(ref / "samples.csv")
    s = s[(s["metric"] == "seqpg") & s["rerun_of"].isna() & ~s["undefined"]]
    a = s[(s["model"] == "bcos_minilm1_rt") & (s["method"] == "native")].set_index(["cluster_id", "sample_id"])
    b = s[(s["model"] == "minilm1_rt") & (s["method"] == "input_x_gradient")].set_index(["cluster_id", "sample_id"])
    diffs = (a["value"] - b["value"]).dropna().reset_index()
    d = diffs.groupby(diffs["sample_id"] // 2)["value"].mean()  # a sequence's 2 segments share their input
    half = float(d.std() / np.sqrt(len(d))) * stats.t.ppf(0.975, len(d) - 1)
    assert row["n"] == len(d) == 6  # 6 sequences, each a cluster (the metric's own rows count 12 segments)
    assert row["here"].endswith(f"{d.mean():+.1f} ± {half:.1f}")
    assert row["verdict"] == verdict("higher", d.mean() - half, d.mean() + half)
    assert "1 " + row["verdict"] in capsys.readouterr().out
    assert (
        "| smoke-text" not in (out / "verdicts.md").read_text()
        and "| P Tab. 1 | f |" in (out / "verdicts.md").read_text()
    )


def test_the_locality_check_gates_the_command_on_the_models_the_run_scored(tmp_path, monkeypatch):
    """smoke's models: the dense-head B-cos CNN wins few cells (GridPG's premise fails), the B-cos ViT most; the run
    records the cached weights, so both are measured."""
    from faithbench.bench.report import paper_claims
    from faithbench.bench.report.sections import claims_section
    from faithbench.models import load_model

    ref, run = ROOT / "results" / "reference" / "smoke", tmp_path / "smoke"
    run.mkdir()
    for name in ("run.json", "samples.csv"):
        shutil.copy(ref / name, run / name)
    results = pd.read_csv(ref / "results.csv")
    for model in ("bcos_cnn_mnist", "bcos_vit_mnist"):
        results.loc[results["model"] == model, "model_weights_sha256"] = load_model(model).weights_sha256
    results.loc[results["model"] == "cnn_mnist", "model_weights_sha256"] = "0" * 64  # not the cached weights
    results.to_csv(run / "results.csv", index=False)
    vit = f"{_row('bcos_vit_mnist')}, {_row('bcos_vit_mnist', 'integrated_gradients')}"
    body = (
        _claim("bcos-vit", "difference", vit, "higher", metric="gridpg", suite="smoke")
        + _claim("dense", "difference", f"{_row('bcos_cnn_mnist')}, {_row('bcos_cnn_mnist', 'gradient')}", "higher",
                 metric="gridpg", suite="smoke")
        + _claim("cnn", "difference", f"{_row('cnn_mnist', 'lrp')}, {_row('cnn_mnist', 'gradient')}", "higher",
                 metric="gridpg", suite="smoke")
    )  # fmt: skip
    claims = _claims_file(tmp_path, body, rules='locality_metrics = ["gridpg"]\n')
    out = tmp_path / "verdicts"
    assert main(["verdicts", str(run), "--claims", str(claims), "--out", str(out), "--locality-grids", "20"]) == 0
    table = pd.read_csv(out / "verdicts.csv").set_index("id")
    assert table.loc["bcos-vit", "n"] == 4 and not table.loc["bcos-vit", "verdict"].startswith("not")
    assert table.loc["dense", "verdict"].startswith("not eligible (bcos_cnn_mnist: cells win ")
    assert table.loc["cnn", "verdict"] == "not eligible (cnn_mnist: no locality check)"
    # the checks are recorded beside the results, so the report's section decides the same claims without a model
    recorded = pd.read_csv(run / "locality.csv").set_index("model")["cell_wins"]
    assert set(recorded.index) == {"bcos_cnn_mnist", "bcos_vit_mnist"}
    assert recorded["bcos_cnn_mnist"] < 0.5 <= recorded["bcos_vit_mnist"]
    monkeypatch.setattr(paper_claims, "CLAIMS_FILE", claims)
    section = claims_section(results, run)
    assert section.title == "Paper claims"
    shown = section.table.set_index("id")
    assert shown.loc[["bcos-vit", "dense", "cnn"], "verdict"].tolist() == table["verdict"].tolist()
    (run / "locality.csv").unlink()
    assert claims_section(results, run).table.set_index("id").loc["bcos-vit", "verdict"].startswith("not eligible")
    assert claims_section(results.assign(suite="other"), run) is None  # no claim of that suite
    # what the claims read, recorded as a small run folder, gives the same table without a model or a measurement
    rec, again = tmp_path / "recorded", tmp_path / "again"
    assert main(["verdicts", str(run), "--claims", str(claims), "--out", str(again), "--record", str(rec)]) == 0
    assert sorted(p.name for p in (rec / "smoke").iterdir()) == [
        "locality.csv",
        "results.csv",
        "run.json",
        "samples.csv",
    ]
    assert len(pd.read_csv(rec / "smoke" / "samples.csv")) < len(pd.read_csv(run / "samples.csv")) / 20
    replay = tmp_path / "replay"
    args = ["verdicts", str(rec / "smoke"), "--claims", str(claims), "--out", str(replay), "--locality-grids", "0"]
    assert main(args) == 0
    assert (replay / "verdicts.csv").read_text() == (again / "verdicts.csv").read_text()
    record = json.loads((run / "run.json").read_text())
    record["suite"]["name"] = "other"
    (run / "run.json").write_text(json.dumps(record))
    assert main(["verdicts", str(run), str(run), "--claims", str(claims), "--out", str(out)]) == 2


def test_accuracy_and_recorded_claims_read_the_models_run_json_records(tmp_path):
    e = accuracy_difference((0.977, 1000), (0.973, 1000), 0.95)
    half = 1.959963984540054 * np.sqrt(0.977 * 0.023 / 1000 + 0.973 * 0.027 / 1000)
    assert e.mean == pytest.approx(0.4) and e.high - e.mean == pytest.approx(100 * half) and e.n == 1000
    body = "".join(
        f'[[claim]]\nid = "{i}"\npaper = "P"\nsource = "Tab. 3"\nfinding = "f"\npaper_value = "v"\nsuite = "s"\n'
        f'kind = "{kind}"\nmodels = {models}\nexpect = "{expect}"\n{extra}\n'
        for i, kind, models, expect, extra in (
            ("acc", "accuracy", '["a", "b"]', "higher", ""),
            ("acc-trend", "accuracy", '["a", "b", "c"]', "falling", ""),
            ("par", "accuracy", '["b", "c"]', "on par", ""),
            ("steps", "recorded", '["a", "b"]', "lower", 'key = "steps_to_best_validation"\ndigits = 0'),
            ("steps-missing", "recorded", '["a", "c"]', "lower", 'key = "steps_to_best_validation"'),
            ("acc-missing", "accuracy", '["a", "d"]', "higher", ""),
        )
    )
    rules, claims = load_claims(_claims_file(tmp_path, body))
    models = {
        "a": {"test_accuracy": 0.98, "n_test": 1000, "steps_to_best_validation": 1595},
        "b": {"test_accuracy": 0.90, "n_test": 1000, "steps_to_best_validation": 3190},
        "c": {"test_accuracy": 0.901, "n_test": 1000},
        "d": {"test_accuracy": 0.9},
    }
    run = RunData(
        "s", pd.DataFrame(columns=["model", "method", "metric", "cluster_id", "sample_id", "value"]), {}, models
    )
    table = evaluate_claims(claims, rules, {"s": run}).set_index("id")
    assert table.loc["acc", "verdict"] == "holds" and table.loc["acc", "here"].startswith("98.0 vs 90.0: +8.0 ± ")
    assert table.loc["acc-trend", "verdict"] == "on par"  # 98 -> 90 falls, 90 -> 90.1 is flat
    assert table.loc["acc-trend", "here"].startswith("98.0 → 90.0 → 90.1 %; steps -8.0 ± ")
    assert table.loc["par", "verdict"] == "holds"
    assert table.loc["steps", "verdict"] == "holds (as recorded)"
    assert table.loc["steps", "here"].startswith("1,595 vs 3,190 steps")
    assert table.loc["steps-missing", "verdict"] == "not run (the s run records no steps_to_best_validation of c)"
    assert table.loc["acc-missing", "verdict"] == "not run (the s run records no held-out accuracy of d)"
    with pytest.raises(UserError, match="names 2 models and expects higher, lower or on par"):
        load_claims(
            _claims_file(
                tmp_path,
                body.replace('["a", "b", "c"]', '["a", "b", "c"]\nkey = "k"').replace(
                    'kind = "accuracy"\nmodels = ["a", "b", "c"]', 'kind = "recorded"\nmodels = ["a", "b", "c"]'
                ),
            )
        )


def test_a_run_records_what_its_units_know_of_each_model(tmp_path):
    from faithbench.bench.run.work import model_record
    from faithbench.bench.store.results import RunStore

    info = {"test_accuracy": 0.9, "n_test": 10, "steps_to_best_validation": 7, "curve": [0.1], "source": "zoo"}
    assert model_record(info) == {"source": "zoo", "test_accuracy": 0.9, "n_test": 10, "steps_to_best_validation": 7}
    units = [
        {"model": "a", "method": "x", "key": "k1", "model_info": model_record(info)},
        {"model": "a", "method": "y", "key": "k2", "model_info": model_record(info)},
        {"model": "b", "method": "x", "key": "k3"},  # a unit written before the record existed
    ]
    store = RunStore(tmp_path)
    store.save_record({"name": "s"}, {}, iter(units))
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["models"] == {"a": model_record(info)} and len(record["units"]) == 3


def test_the_results_pages_claims_table_is_generated_from_the_committed_inputs(tmp_path):
    """docs/results.md's table is `bench verdicts` on results/claims/* (.ci/regenerate-claims-table writes it)."""
    runs = sorted(str(p) for p in (ROOT / "results" / "claims").glob("*/") if p.is_dir())
    assert main(["verdicts", *runs, "--locality-grids", "0", "--out", str(tmp_path)]) == 0
    page = (ROOT / "docs" / "results.md").read_text()
    block = page.split("<!-- verdicts:start -->\n")[1].split("<!-- verdicts:end -->")[0]
    assert block == (tmp_path / "verdicts.md").read_text()
    _, claims = load_claims()
    assert block.count("\n| ") == len(claims) + 1  # the separator line and one row per claim


def test_rows_of_other_shapes_are_not_paired_and_infinite_scores_are_left_out(tmp_path):
    cnn = [(c, 9 * c + k, 50.0 + c + k) for c in range(3) for k in range(2)]
    vit = [(c, 9 * c + k, 40.0 + k) for c in range(3) for k in range(2)]
    vit[0] = (0, 0, float("inf"))
    samples = _samples({("cnn", "native"): cnn, ("vit", "native"): vit})
    params = {("cnn", "native", "m"): {"grid_size": 3}, ("vit", "native", "m"): {"grid_size": 2}}
    body = _claim("mixed", "difference", f"{_row('cnn')}, {_row('vit')}", "higher") + _claim(
        "sign", "sign", _row("vit"), "positive"
    )
    rules, claims = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    table = evaluate_claims(claims, rules, {"s": RunData("s", samples, params)}).set_index("id")
    assert table.loc["mixed", "verdict"].startswith("not eligible (the rows' items have different shapes")
    assert table.loc["sign", "here"].startswith("40.7 ± ") and table.loc["sign", "verdict"] == "holds"  # 41, 40.5, 40.5


@pytest.mark.parametrize(
    ("rules", "message"),
    [('locality_metrics = "gridpg"\n', "a list of metric names"), ("level = 95\n", r"a probability in \(0, 1\)")],
)
def test_malformed_rules_are_refused(tmp_path, rules, message):
    with pytest.raises(UserError, match=message):
        load_claims(_claims_file(tmp_path, "", rules=rules))


def test_the_recorded_locality_checks_are_in_model_order_whatever_the_set_order(tmp_path):
    """The claims' recorded inputs are byte-stable: a run's cell wins come back sorted by model (the models arrive
    as a set, whose order changes between processes), so re-recording the same runs changes no file."""
    record_locality(tmp_path, {"vit_mnist": 0.9, "bcos_vit_mnist": 0.7, "cnn_gap_mnist": 0.95})
    wins = run_locality(tmp_path, None, {"cnn_gap_mnist", "vit_mnist", "bcos_vit_mnist"}, n_grids=0)
    assert list(wins) == ["bcos_vit_mnist", "cnn_gap_mnist", "vit_mnist"]
    assert wins["vit_mnist"] == 0.9
