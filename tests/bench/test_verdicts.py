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
from faithbench.bench.report.claim_rule import (
    Estimate,
    accuracy_difference,
    against_paper,
    decide,
    one_sample,
    paired_accuracy_difference,
    paired_difference,
)
from faithbench.bench.report.claim_table import summary
from faithbench.bench.report.claim_verdicts import RunData, evaluate_claims, run_data
from faithbench.bench.report.paper_claims import CAUSES, CLAIMS_FILE, MODEL_KINDS, Row, load_claims
from faithbench.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
T_975_2 = 4.302652729911275  # t quantile, 2 degrees of freedom


@pytest.mark.parametrize(
    ("expect", "low", "high", "margin", "expected"),
    [
        ("higher", 0.1, 2.0, None, "holds"),
        ("higher", -0.1, 2.0, None, "inconclusive"),
        ("higher", -2.0, -0.1, None, "fails"),
        ("lower", -2.0, -0.1, None, "holds"),
        ("lower", 0.1, 2.0, None, "fails"),
        ("lower", -1.0, 1.0, None, "inconclusive"),
        ("positive", 0.4, 0.8, None, "holds"),
        ("negative", -9.8, 2.0, None, "inconclusive"),  # -3.9 ± 5.9: not shown negative
        ("rising", 0.0, 1.0, None, "inconclusive"),  # an interval that touches 0 contains it
        ("falling", -3.0, -1.0, None, "holds"),
        # equivalence within ±2.5: ALOE's -1.3 at 90 % [-2.2, -0.4] is equivalent although it excludes 0
        ("equivalent", -2.2, -0.4, 2.5, "equivalent"),
        ("equivalent", -5.8, 0.2, 2.0, "inconclusive"),  # wide: noise no longer makes a claim hold
        ("equivalent", 8.3, 9.3, 2.5, "not equivalent"),
        ("equivalent", -3.0, -2.6, 2.5, "not equivalent"),
        ("equivalent", -3.0, -2.5, 2.5, "inconclusive"),  # touching the margin is neither inside nor outside
        ("equivalent", -2.4, 2.5, 2.5, "inconclusive"),  # touching it from inside is not inside
    ],
)
def test_the_verdict_rule(expect, low, high, margin, expected):
    assert decide(expect, low, high, margin) == expected


def test_an_equivalence_needs_its_margin():
    with pytest.raises(ValueError, match="margin"):
        decide("equivalent", -1.0, 1.0)


@pytest.mark.parametrize(
    ("estimate", "paper", "ratio", "contains"),
    [
        (Estimate(36.2, 35.8, 36.6, 88), (32.7, 32.7), 36.2 / 32.7, "no"),
        (Estimate(3.5, -1.0, 8.0, 320), (12.0, 12.0), 3.5 / 12.0, "no"),
        (Estimate(3.0, -3.7, 9.7, 200), (4.5, 4.5), 3.0 / 4.5, "yes"),
        (Estimate(28.3, 27.1, 29.5, 30), (13.0, 35.0), 28.3 / 24.0, "yes"),  # a range: its midpoint, overlap
        (Estimate(40.0, 39.0, 41.0, 30), (13.0, 35.0), 40.0 / 24.0, "no"),
        (Estimate(1.0, 0.5, 1.5, 30), (0.0, 0.0), float("nan"), "no"),  # no ratio to a zero effect
    ],
)
def test_the_paper_effect_beside_the_estimate(estimate, paper, ratio, contains):
    got_ratio, got_contains = against_paper(estimate, paper)
    assert got_contains == contains
    assert got_ratio == pytest.approx(ratio, nan_ok=True)
    assert against_paper(estimate, None) == (pytest.approx(float("nan"), nan_ok=True), "")


def test_paired_accuracy_by_hand():
    """10 items: a right on 8, b on 6; discordant pairs n10 = 3 (a right, b wrong), n01 = 1."""
    a = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
    b = np.array([1, 1, 1, 1, 1, 0, 0, 0, 1, 0])  # a-only on items 5, 6, 7; b-only on item 8
    e = paired_accuracy_difference(a, b, 0.95)
    p10, p01 = 3.5 / 12, 1.5 / 12  # Agresti and Min: half an item added to each cell, n + 2 items
    var = (p10 + p01 - (p10 - p01) ** 2) / 12
    assert e.mean == pytest.approx(20.0) and e.n == 10 and (e.a, e.b) == pytest.approx((80.0, 60.0))
    assert e.high - e.mean == pytest.approx(100 * 1.959963984540054 * np.sqrt(var))
    same = paired_accuracy_difference(a, a, 0.95)  # no discordant item: still an interval of some width
    assert same.mean == 0 and same.high - same.low > 5
    # the same items as an unpaired comparison would be wider: pairing removes the items both get right
    unpaired = accuracy_difference((0.8, 10), (0.6, 10), 0.95)
    assert e.high - e.low < unpaired.high - unpaired.low
    with pytest.raises(ValueError, match="equal length"):
        paired_accuracy_difference(a, b[:5], 0.95)


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
    # the same claims with every model local: the trend is decided on its endpoint (b3 - b1: +10, +11, +10, +10),
    # its flat last step decides nothing; unshared items are refused
    local = replace(run, locality={"b1": 0.9, "b2": 0.8, "b3": 0.6, "other": 1.0})
    table = evaluate_claims(claims, rules, {"s": local})
    table = table.set_index("id")
    assert table.loc["rise", "verdict"] == "holds"
    assert table.loc["rise", "here"].startswith("10.5 → 20.8 → 20.8; endpoint +10.2 ± ")
    assert table.loc["unshared", "verdict"] == "not eligible (other's items were chosen per model, not shared)"
    # a metric outside the locality rule needs no check
    ungated, _ = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    table = evaluate_claims(claims, ungated, {"s": replace(run, locality={})}).set_index("id")
    assert table.loc["local", "verdict"] == "holds"
    # a model that predicts one class held out has not learned: no claim reads its explanations (a build that does
    # not record how many classes it predicts passes)
    models = {"b1": {"test_predicted_classes": 2}, "b3": {"test_predicted_classes": 1}, "b2": {}}
    table = evaluate_claims(claims, ungated, {"s": replace(run, locality={}, models=models)}).set_index("id")
    assert table.loc["local", "verdict"] == "not eligible (b3 predicts 1 class on its held-out items)"
    assert table.loc["rise", "verdict"] == "not eligible (b3 predicts 1 class on its held-out items)"
    assert table.loc["step", "verdict"] == "holds"


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
        (_claim("a", "difference", f"{_row('x')}, {_row('y')}", "on par"), "'on par' is no claim the rule can decide"),
        (_claim("a", "difference", f"{_row('x')}, {_row('y')}", "equivalent"), "declares its margin and margin_reason"),
        (_claim("a", "difference", f"{_row('x')}, {_row('y')}", "higher") + "margin = 2\n", "only an equivalence"),
        (
            _claim("a", "difference", f"{_row('x')}, {_row('y')}", "equivalent") + 'margin = -1\nmargin_reason = "r"\n',
            "margin is a positive number",
        ),
        (_claim("a", "sign", _row("x"), "positive") + "paper_effect = [3, 1]\n", "low <= high"),
        (_claim("a", "sign", _row("x"), "positive") + 'paper_effect = "big"\n', "paper_effect is a number"),
        (_claim("a", "sign", _row("x"), "positive") + 'cause = "bad luck"\ncause_note = "n"\n', "a cause is one of"),
        (_claim("a", "sign", _row("x"), "positive") + 'cause = "rule"\n', "with a one-line cause_note"),
        (_claim("a", "sign", _row("x"), "positive") + 'extension = "yes"\n', "extension is true or false"),
    ],
)
def test_a_malformed_claims_file_is_refused_naming_the_claim(tmp_path, body, message):
    with pytest.raises(UserError, match="claim") as info:
        load_claims(_claims_file(tmp_path, body))
    assert message in str(info.value)


def test_the_table_shows_sizes_labels_and_causes(tmp_path):
    """An equivalence, a direction with the paper's effect, an extension, a definition-decided claim and the causes:
    each as the table shows it, and the totals per block."""
    a = [(c, c, 10.0 + (c % 3)) for c in range(6)]
    samples = _samples(
        {
            ("x", "native"): a,
            ("y", "native"): [(c, s, v - 1.0 + 0.1 * (c % 2)) for c, s, v in a],  # about -1 below x: tight
            ("z", "native"): [(c, s, v - 3.0 - (c % 2)) for c, s, v in a],  # x - z: +3.5 ± 0.6
        }
    )
    params = {(m, "native", "m"): {} for m in "xyz"}
    equivalent = 'margin = 2.5\nmargin_reason = "points"\n'
    body = (
        _claim("eq", "difference", f"{_row('x')}, {_row('y')}", "equivalent") + equivalent
        + _claim("eq-tight", "difference", f"{_row('x')}, {_row('y')}", "equivalent")
        + 'margin = 0.5\nmargin_reason = "points"\ncause = "substantive"\ncause_note = "about a point apart"\n'
        + _claim("up", "difference", f"{_row('x')}, {_row('z')}", "higher") + "paper_effect = 3.0\n"
        + _claim("small", "difference", f"{_row('x')}, {_row('z')}", "higher") + "paper_effect = [10, 20]\n"
        + _claim("down", "difference", f"{_row('x')}, {_row('z')}", "lower") + "extension = true\n"
        + _claim("built-in", "difference", f"{_row('x')}, {_row('z')}", "higher")
        + 'not_comparable = "the method is the map by construction"\n'
    )  # fmt: skip
    rules, claims = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    table = evaluate_claims(claims, rules, {"s": RunData("s", samples, params)}).set_index("id")
    assert table.loc["eq", "verdict"] == "equivalent" and table.loc["eq", "cause"] == ""
    assert "; 90 % [+0" in table.loc["eq", "here"] and table.loc["eq", "here"].endswith("] vs ±2.5")
    assert table.loc["eq-tight", "verdict"] == "not equivalent"
    assert table.loc["eq-tight", "cause"] == "substantive: about a point apart"
    assert table.loc["up", "verdict"] == "holds" and table.loc["up", "paper_effect"] == "+3.0"
    assert table.loc["up", "contains_paper"] == "yes" and table.loc["up", "ratio"] == pytest.approx(3.5 / 3.0)
    assert table.loc["small", "verdict"] == "holds" and table.loc["small", "contains_paper"] == "no"
    assert table.loc["small", "paper_effect"] == "+10.0 to +20.0" and table.loc["small", "ratio"] == pytest.approx(
        3.5 / 15
    )
    assert table.loc["down", "verdict"] == "fails" and table.loc["down", "cause"] == "undeclared"
    assert table.loc["down", "block"] == "extension" and table.loc["up", "block"] == "paper"
    assert table.loc["built-in", "verdict"] == "not comparable (the method is the map by construction)"
    assert table.loc["built-in", "here"].startswith("11.0 vs 7.5: +3.5 ± ") and table.loc["built-in", "cause"] == ""
    lines = summary(table.reset_index())
    assert lines["paper"] == (
        "the papers' claims (5): 2 holds, 1 equivalent, 1 not equivalent, 1 not comparable; "
        "direction and size reproduced in 1 of the 2 with a paper effect"
    )
    assert lines["extension"] == "extensions (1): 1 fails"


def test_every_shipped_claim_names_rows_its_suite_computes():
    rules, claims = load_claims(CLAIMS_FILE)
    assert len(claims) >= 21 and rules.min_cell_wins == 0.5 and rules.locality_metrics == ("gridpg",)
    for c in claims:
        suite = tomllib.loads((ROOT / "bench" / "suites" / f"{c.suite}.toml").read_text())
        if c.kind == "untested":
            assert c.reason
            continue
        if c.kind in MODEL_KINDS:
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
    assert row["verdict"] == decide("higher", d.mean() - half, d.mean() + half)
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
            ("acc-trend", "accuracy", '["a", "b", "c"]', "falling", ""),  # endpoint c - a: -7.9
            ("par", "accuracy", '["b", "c"]', "equivalent", 'margin = 2.0\nmargin_reason = "points"'),
            ("par-wide", "accuracy", '["b", "c"]', "equivalent", 'margin = 1.0\nmargin_reason = "points"'),
            ("paired", "accuracy", '["e", "f"]', "higher", ""),
            ("steps", "recorded", '["a", "b"]', "lower", 'key = "steps_to_best_validation"\ndigits = 0'),
            ("steps-missing", "recorded", '["a", "c"]', "lower", 'key = "steps_to_best_validation"'),
            ("acc-missing", "accuracy", '["a", "d"]', "higher", ""),
        )
    )
    rules, claims = load_claims(_claims_file(tmp_path, body))
    # e and f: the same 10 items, e right on 8, f on 6, and both right on the first 5
    models = {
        "a": {"test_accuracy": 0.98, "n_test": 1000, "steps_to_best_validation": 1595},
        "b": {"test_accuracy": 0.90, "n_test": 1000, "steps_to_best_validation": 3190},
        "c": {"test_accuracy": 0.901, "n_test": 1000},
        "d": {"test_accuracy": 0.9},
        "e": {"test_accuracy": 0.8, "n_test": 10, "test_correct": "1111111100"},
        "f": {"test_accuracy": 0.6, "n_test": 10, "test_correct": "1111100010"},
    }
    run = RunData(
        "s", pd.DataFrame(columns=["model", "method", "metric", "cluster_id", "sample_id", "value"]), {}, models
    )
    table = evaluate_claims(claims, rules, {"s": run}).set_index("id")
    assert table.loc["acc", "verdict"] == "holds" and table.loc["acc", "here"].startswith("98.0 vs 90.0: +8.0 ± ")
    assert table.loc["acc", "here"].endswith("points (unpaired)")
    assert table.loc["acc-trend", "verdict"] == "holds"  # decided on the endpoint, 98 -> 90.1
    assert table.loc["acc-trend", "here"].startswith("98.0 → 90.0 → 90.1 %; endpoint -7.9 ± ")
    # -0.1 points, 90 % interval about ±2.2 (two unpaired proportions of 1,000): wider than either margin
    assert table.loc["par", "verdict"] == "inconclusive" and "; 90 % [" in table.loc["par", "here"]
    assert table.loc["par-wide", "verdict"] == "inconclusive"
    paired = paired_accuracy_difference(np.array([1] * 8 + [0] * 2), np.array([1] * 5 + [0, 0, 0, 1, 0]), 0.95)
    assert table.loc["paired", "here"] == f"80.0 vs 60.0: +20.0 ± {(paired.high - paired.low) / 2:.1f} points (paired)"
    assert table.loc["steps", "verdict"] == "holds (as recorded)"
    assert table.loc["steps", "here"].startswith("1,595 vs 3,190 steps")
    assert table.loc["steps-missing", "verdict"] == "not run (the s run records no steps_to_best_validation of c)"
    assert table.loc["acc-missing", "verdict"] == "not run (the s run records no held-out accuracy of d)"
    with pytest.raises(UserError, match="names 2 models and expects higher or lower"):
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
    info |= {"test_correct": "1111111110", "test_accuracy_by_epoch": (0.5, 0.9), "kept_epoch": True}
    assert model_record(info) == {
        "source": "zoo",
        "test_accuracy": 0.9,
        "n_test": 10,
        "test_correct": "1111111110",  # the per-item results behind paired accuracy claims
        "steps_to_best_validation": 7,
        "test_accuracy_by_epoch": [0.5, 0.9],  # the training-speed claims
    }
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
    rows = [
        line for line in block.splitlines() if line.startswith("| ") and not line.startswith(("| ---", "| paper |"))
    ]
    assert len(rows) == len(claims)  # one row per claim, in two tables (the papers' claims, the extensions)
    assert block.count("| paper | claim |") == 2 and "**Extensions (14)**" in block


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
    [('locality_metrics = "gridpg"\n', "a list of metric names"), ("level = 95\n", r"probabilities in \(0, 1\)")],
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


def test_speedup_and_cost_claims_are_decided_as_recorded(tmp_path):
    """The training speed-up from the recorded accuracy by epoch, the explanation cost from the results' seconds."""
    body = "".join(
        f'[[claim]]\nid = "{i}"\npaper = "P"\nsource = "Tab. 4"\nfinding = "f"\npaper_value = "v"\nsuite = "s"\n'
        f"{rest}\n"
        for i, rest in (
            ("fast", 'kind = "speedup"\nmodels = ["tuned", "scratch"]\nexpect = "higher"\npaper_effect = 5.2'),
            ("never", 'kind = "speedup"\nmodels = ["stuck", "scratch"]\nexpect = "higher"\ncause = "toy scale"\n'
             'cause_note = "short schedules"'),
            ("slower", 'kind = "speedup"\nmodels = ["scratch", "tuned"]\nexpect = "higher"'),
            ("unlogged", 'kind = "speedup"\nmodels = ["tuned", "plain"]\nexpect = "higher"'),
            ("cheap", 'kind = "cost"\nmetric = "m"\nrows = [{ model = "x", method = "native" }, '
             '{ model = "x", method = "lime" }]\nexpect = "lower"\npaper_effect = 85'),
            ("untimed", 'kind = "cost"\nmetric = "m"\nrows = [{ model = "x", method = "native" }, '
             '{ model = "x", method = "ig" }]\nexpect = "lower"'),
        )
    )  # fmt: skip
    rules, claims = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    models = {
        "tuned": {"test_accuracy_by_epoch": [0.96, 0.975, 0.98]},  # reaches 0.97 at epoch 2
        "scratch": {"test_accuracy_by_epoch": [0.80, 0.90, 0.95, 0.96, 0.97, 0.969]},  # its best, 0.97, at epoch 5
        "stuck": {"test_accuracy_by_epoch": [0.5, 0.6]},
        "plain": {"test_accuracy": 0.9, "n_test": 10},
    }
    results = pd.DataFrame(
        {
            "model": ["x", "x", "x"],
            "method": ["native", "lime", "ig"],
            "metric": ["m"] * 3,
            "params": ["{}"] * 3,
            "explain_time_s": [0.32, 80.0, float("nan")],
            "n": [300, 310, 320],
            "n_undefined": [20, 10, 0],  # explained, then undefined: explained all the same
        }
    )
    run = run_data(
        "s", results, pd.DataFrame(columns=["model", "method", "metric", "cluster_id", "sample_id", "value"])
    )
    run = replace(run, models=models)
    table = evaluate_claims(claims, rules, {"s": run}).set_index("id")
    assert table.loc["fast", "verdict"] == "holds (as recorded)"
    assert table.loc["fast", "here"].startswith("2 vs 5 epochs to 97.0 %: 2.5x")
    assert table.loc["fast", "ratio"] == pytest.approx(2.5 / 5.2) and table.loc["fast", "contains_paper"] == "no"
    assert table.loc["never", "verdict"] == "fails (as recorded)"
    assert table.loc["never", "cause"] == "toy scale: short schedules"
    assert table.loc["slower", "verdict"] == "fails (as recorded)"  # the tuned model's best at 3 of its epochs
    assert table.loc["slower", "cause"] == "undeclared"
    assert table.loc["unlogged", "verdict"] == "not run (the s run records no accuracy by epoch of plain)"
    # 0.32 s / 320 inputs = 1 ms against 80 s / 320 = 250 ms: 250x cheaper
    assert table.loc["cheap", "verdict"] == "holds (as recorded)" and "250x cheaper" in table.loc["cheap", "here"]
    assert table.loc["cheap", "ratio"] == pytest.approx(250 / 85)
    assert table.loc["untimed", "verdict"] == "not run (the s run records no explanation time of x / ig)"


def test_one_claim_for_each_method_of_a_figure(tmp_path):
    body = (
        '[[claim]]\nid = "fig-{method}"\nfor_methods = ["lime", "gradcam"]\npaper = "P"\nsource = "Fig. 6"\n'
        'finding = "W(x)x beats {method}"\npaper_value = "v"\nsuite = "s"\nmetric = "m"\nkind = "difference"\n'
        'rows = [{ model = "x", method = "native" }, { model = "y", method = "{method}" }]\nexpect = "higher"\n'
    )
    _, claims = load_claims(_claims_file(tmp_path, body))
    assert [c.id for c in claims] == ["fig-lime", "fig-gradcam"]
    assert [c.finding for c in claims] == ["W(x)x beats lime", "W(x)x beats gradcam"]
    assert claims[1].rows == (Row(model="x", method="native"), Row(model="y", method="gradcam"))
    with pytest.raises(UserError, match="has {method} in its id"):
        load_claims(_claims_file(tmp_path, body.replace('id = "fig-{method}"', 'id = "fig"')))
    with pytest.raises(UserError, match="for_methods is a list of method names"):
        load_claims(_claims_file(tmp_path, body.replace('["lime", "gradcam"]', '"lime"')))


def test_every_shipped_claim_that_does_not_hold_names_its_cause(tmp_path):
    """The committed table: no verdict reads "on par", every decided claim that does not hold has a declared cause
    from the fixed list, and a claim with a paper effect shows the ratio and whether its interval contains it."""
    runs = sorted(str(p) for p in (ROOT / "results" / "claims").glob("*/") if p.is_dir())
    assert main(["verdicts", *runs, "--locality-grids", "0", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "verdicts.csv", keep_default_na=False)
    assert not table["verdict"].str.contains("on par").any()
    decided = table[
        table["verdict"].str.split(" (", regex=False).str[0].isin(["fails", "inconclusive", "not equivalent"])
    ]
    assert len(decided) > 0
    undeclared = decided.loc[decided["cause"] == "undeclared", "id"].tolist()
    assert not undeclared, f"claims that do not hold without a declared cause: {undeclared}"
    assert decided["cause"].str.split(":").str[0].isin(CAUSES).all()
    sized = table[(table["paper_effect"] != "") & (table["here"] != "")]
    assert len(sized) > 10 and sized["contains_paper"].isin(["yes", "no"]).all()


def test_a_claim_over_three_builds_carries_the_spread_between_them(tmp_path):
    """Three builds of both models: each build's paired difference, their mean, the t interval over the 3 builds
    (2 degrees of freedom) and each build's estimate behind the row; a build the run lacks for one model is left
    out; recorded numbers hold when every build's does."""
    shift = {1: 8.0, 2: 5.0, 3: 2.0}  # the per-build differences x - y
    rows = {}
    for k, d in shift.items():
        suffix = "" if k == 1 else f"@{k}"
        rows[(f"x{suffix}", "native")] = [(c, c, 10.0 + d + 0.2 * (c % 2)) for c in range(6)]
        rows[(f"y{suffix}", "native")] = [(c, c, 10.0) for c in range(6)]
    rows[("x@4", "native")] = [(c, c, 50.0) for c in range(6)]  # no y@4: build 4 is not a complete build
    samples = _samples(rows)
    params = {(m, j, "m"): {} for m, j in rows}
    models = {m: {"steps_to_best_validation": 100 * (1 + (m.startswith("y")))} for m, _ in rows}
    body = (
        _claim("up", "difference", f"{_row('x')}, {_row('y')}", "higher") + "paper_effect = 6\n"
        + _claim("eq", "difference", f"{_row('x')}, {_row('y')}", "equivalent")
        + 'margin = 3\nmargin_reason = "points"\ncause = "rule"\ncause_note = "3 builds"\n'
        + '[[claim]]\nid = "steps"\npaper = "P"\nsource = "Tab. 3"\nfinding = "f"\npaper_value = "v"\nsuite = "s"\n'
        'kind = "recorded"\nmodels = ["x", "y"]\nkey = "steps_to_best_validation"\nexpect = "lower"\ndigits = 0\n'
    )  # fmt: skip
    rules, claims = load_claims(_claims_file(tmp_path, body, rules="locality_metrics = []\n"))
    table = evaluate_claims(claims, rules, {"s": RunData("s", samples, params, models)}).set_index("id")
    means = np.array([d + 0.1 for d in shift.values()])  # per build: the mean over its 6 clusters
    se_items = np.std([0.0, 0.2] * 3, ddof=1) / np.sqrt(6)  # each build's standard error over its clusters
    spread, noise = means.var(ddof=1) / 3, se_items**2  # the builds' spread and the items' shared noise
    se = np.sqrt(spread + noise)
    df = (spread + noise) ** 2 / (spread**2 / 2 + noise**2 / 5)  # Welch-Satterthwaite: 2 and 6 - 1 df
    assert 2 <= df < 2.01  # builds this far apart: the builds' 2 degrees of freedom
    half = stats.t.ppf(0.975, df) * se
    up = table.loc["up"]
    assert up["n"] == 3 and up["here"] == f"15.1 vs 10.0: +{means.mean():.1f} ± {half:.1f} over 3 builds"
    assert up["builds"].startswith("+8.1 ± 0.1 / +5.1 ± 0.1 / +2.1 ± 0.1")
    # each build alone holds (±0.1), but 8 / 5 / 2 over 3 builds is +5.1 ± 7.5: the builds' spread decides
    assert up["verdict"] == "inconclusive" and up["cause"] == "undeclared" and up["contains_paper"] == "yes"
    eq = table.loc["eq"]
    assert eq["verdict"] == "inconclusive" and eq["cause"] == "rule: 3 builds"
    assert f"; 90 % [{means.mean() - stats.t.ppf(0.95, df) * se:+.1f}, " in eq["here"]
    steps = table.loc["steps"]
    assert steps["verdict"] == "holds (as recorded, 3 builds)" and steps["builds"] == "-100 / -100 / -100"
    # one build only: the claim reads as before, on build 1
    first = samples[~samples["model"].str.contains("@")]
    params1 = {k: v for k, v in params.items() if "@" not in k[0]}
    table1 = evaluate_claims(claims, rules, {"s": RunData("s", first, params1, models)}).set_index("id")
    assert table1.loc["up", "verdict"] == "holds" and table1.loc["up", "builds"] == ""
    assert table1.loc["up", "here"].startswith("18.1 vs 10.0: +8.1 ± ")


def test_builds_that_agree_keep_the_items_interval_not_the_builds_degrees_of_freedom():
    """Three builds that agree (8.0 / 8.1 / 7.9) over 40 noisy items: the interval is about the items' (t at about
    n - 1 degrees of freedom), not 4.3 / 2.0 = 2.2 times it, as a t at K - 1 = 2 degrees of freedom made it (three
    agreeing builds must not decide less than one)."""
    from faithbench.bench.report.claim_builds import over_builds

    means, ses = np.array([8.0, 8.1, 7.9]), np.array([2.5, 2.5, 2.5])
    e = over_builds(means, ses, 0.95, items=40)
    spread, noise = means.var(ddof=1) / 3, 2.5**2
    df = (spread + noise) ** 2 / (spread**2 / 2 + noise**2 / 39)
    assert 38 < df < 40
    assert e.high - e.mean == pytest.approx(stats.t.ppf(0.975, df) * np.sqrt(spread + noise))
    assert e.high - e.mean < 1.01 * stats.t.ppf(0.975, 39) * 2.5 and e.high - e.mean < T_975_2 * 2.5 / 2
    assert over_builds(means, ses, 0.95).high - e.mean == pytest.approx(T_975_2 * np.sqrt(spread + noise))


def test_the_docs_figures_from_runs_are_generated_from_the_recorded_runs():
    """README.md, docs/index.md, docs/results.md and docs/models.md show the runs' figures in recorded blocks: each
    is what faithbench.bench.report.recorded makes of results/claims (.ci/regenerate-claims-table writes them)."""
    from faithbench.bench.report.recorded import BLOCK, PAGES, regenerate

    for name in PAGES:
        text = (ROOT / name).read_text()
        assert BLOCK.search(text), f"{name} has no recorded block"
        assert regenerate(text, ROOT / "results" / "claims") == text, (
            f"{name}'s figures from runs are stale: bash .ci/regenerate-claims-table"
        )
    readme, index = ((ROOT / n).read_text() for n in ("README.md", "docs/index.md"))
    assert BLOCK.search(readme).group(3) == BLOCK.search(index).group(3)  # one excerpt, not two


def test_a_recorded_block_is_the_mean_of_the_recorded_samples():
    from faithbench.bench.report.recorded import block

    table = block("bcos-ablation", ROOT / "results" / "claims")
    s = pd.read_csv(ROOT / "results" / "claims" / "bcos-ablation" / "samples.csv")
    s = s[(s["model"] == "cnn_gap_mnist") & (s["method"] == "input_x_gradient") & ~s["undefined"]]
    grids = s.groupby("cluster_id")["value"].mean()
    half = stats.t.ppf(0.975, len(grids) - 1) * grids.std() / np.sqrt(len(grids))
    assert f"| `cnn_gap_mnist` | input_x_gradient | gridpg | {grids.mean():.1f} ± {half:.1f} | {len(grids)} |" in table


def test_the_agreement_block_reads_build_1_tables_of_three_methods_or_more(tmp_path):
    """Samples that all order three methods alike: alpha 1 and two samples settle the order; a table of two methods
    and a model's build 2 are left out."""
    from faithbench.bench.report.recorded import agreement_table

    folder = tmp_path / "s"
    folder.mkdir()
    rows = {
        (m, j): [(c, c, base + 0.1 * c) for c in range(6)]
        for m in ("x", "x@2")
        for j, base in zip("pqr", (1, 5, 9), strict=True)
    }
    rows |= {("y", "p"): [(c, c, 1.0 + c) for c in range(6)], ("y", "q"): [(c, c, 9.0 - c) for c in range(6)]}
    _samples(rows).assign(rerun_of=np.nan, undefined=False).to_csv(folder / "samples.csv", index=False)
    results = pd.DataFrame([{"model": m, "method": j, "metric": "m", "mean": 0.0, "params": "{}"} for m, j in rows])
    results.to_csv(folder / "results.csv", index=False)
    (folder / "run.json").write_text(json.dumps({"suite": {"name": "s"}}))
    lines = agreement_table(tmp_path).splitlines()
    # MAD ratio: the 18 values' deviations from their median 5.25 have median 3.85; each method's own MAD is 0.15
    assert lines[2:] == ["| s | `x` | m | 3 | 6 | 1.00 | 25.67 | 2 of 6 |"]


def test_the_command_records_and_replays_every_build_of_a_claims_models(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = {}
    for k, d in {1: 8.0, 2: 5.0, 3: 2.0}.items():
        suffix = "" if k == 1 else f"@{k}"
        rows[(f"x{suffix}", "native")] = [(c, c, 10.0 + d + 0.2 * (c % 2)) for c in range(6)]
        rows[(f"y{suffix}", "native")] = [(c, c, 10.0) for c in range(6)]
    rows[("z", "native")] = [(c, c, 1.0) for c in range(6)]  # in no claim: not recorded
    samples = _samples(rows).assign(rerun_of=np.nan, undefined=False)
    samples.to_csv(run / "samples.csv", index=False)
    results = pd.DataFrame([{"model": m, "method": j, "metric": "m", "mean": 0.0, "params": "{}"} for m, j in rows])
    results.to_csv(run / "results.csv", index=False)
    (run / "run.json").write_text(json.dumps({"suite": {"name": "s"}}))
    claims = _claims_file(tmp_path, _claim("up", "difference", f"{_row('x')}, {_row('y')}", "higher"), "")
    out, rec, again = tmp_path / "out", tmp_path / "rec", tmp_path / "again"
    args = ["--claims", str(claims), "--locality-grids", "0"]
    assert main(["verdicts", str(run), *args, "--out", str(out), "--record", str(rec)]) == 0
    kept = pd.read_csv(rec / "s" / "samples.csv")
    assert set(kept["model"]) == {"x", "x@2", "x@3", "y", "y@2", "y@3"}
    assert main(["verdicts", str(rec / "s"), *args, "--out", str(again)]) == 0
    assert (again / "verdicts.csv").read_text() == (out / "verdicts.csv").read_text()
    row = pd.read_csv(out / "verdicts.csv").iloc[0]
    assert row["n"] == 3 and row["here"].endswith("over 3 builds") and row["verdict"] == "inconclusive"
