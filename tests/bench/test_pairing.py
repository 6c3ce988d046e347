"""Items shared across models (GridPG grids on images every model classifies) and intervals by grid."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from faithbench.bench.report.statistics import paired_tests
from faithbench.bench.run.pairing import SharedItems, load_shared, save_shared, shared_digest
from faithbench.bench.store.intervals import summarise
from faithbench.metrics.gridpg import GridPGConfig, pairing_models
from faithbench.metrics.gridpg_presets import get_preset
from faithbench.metrics.grids import grid_eligibility, select_by_confidence, select_grids


def test_cluster_robust_interval_by_hand():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    clusters = np.array([0, 0, 1, 1, 2, 2])
    s = summarise(values, clusters)
    # residual sums per cluster: -4, 0, 4; var = G / (G - 1) * 32 / n^2 with G = 3, n = 6
    half = stats.t.ppf(0.975, 2) * math.sqrt(1.5 * 32) / 6
    assert s["mean"] == 3.5 and s["n"] == 6 and s["n_clusters"] == 3
    assert s["ci_high"] - s["mean"] == pytest.approx(half)
    independent = summarise(values)
    assert independent["n_clusters"] == 6 and independent["ci_high"] - 3.5 < half  # cells as samples: narrower
    # a NaN drops its sample, and a cluster without a finite value drops out of G
    assert summarise(np.array([1.0, np.nan, np.nan, np.nan, 2.0, 3.0]), clusters)["n_clusters"] == 2


def test_paired_tests_pair_grids_not_cells():
    rows = []
    for grid in range(5):
        for cell in range(4):
            sid = grid * 4 + cell
            rows += [("m", "gridpg", "a", sid, grid, 0.5 + 0.1 * cell), ("m", "gridpg", "b", sid, grid, 0.4)]
    samples = pd.DataFrame(rows, columns=["model", "metric", "method", "sample_id", "cluster_id", "value"])
    results = pd.DataFrame({"model": ["m"], "metric": ["gridpg"], "higher_is_better": [True]})
    table = paired_tests(results, samples)
    assert set(table["n_paired"]) == {5}  # 5 grids, not 20 cells


def _logits(labels: torch.Tensor, wrong: list[int]) -> torch.Tensor:
    logits = torch.full((len(labels), 4), -4.0)
    logits[torch.arange(len(labels)), labels] = 4.0
    for i in wrong:  # misclassified: the next class wins
        logits[i] = -4.0
        logits[i, (int(labels[i]) + 1) % 4] = 4.0
    return logits


def test_shared_grids_use_only_images_every_model_classifies_and_are_the_same_for_every_model():
    labels = torch.arange(4).repeat(6)  # 24 images, 4 classes
    preset = get_preset("aloe")  # 2 x 2 grids for every model
    a, b = _logits(labels, wrong=[0, 5]), _logits(labels, wrong=[1, 6])
    parts = [grid_eligibility(preset, labels, x, "softmax") for x in (a, b)]
    eligible = parts[0][0] & parts[1][0]
    score = (parts[0][1] + parts[1][1]) / 2
    assert not eligible[[0, 1, 5, 6]].any() and eligible.sum() == 20
    sel_a = select_grids(preset, labels, a, is_vit=False, n_grids=None, shared=(eligible, score))
    sel_b = select_grids(preset, labels, b, is_vit=False, n_grids=None, shared=(eligible, score))
    assert torch.equal(sel_a.indices, sel_b.indices) and len(sel_a.indices) > 0
    assert not set(sel_a.indices.flatten().tolist()) & {0, 1, 5, 6}
    own_a = select_grids(preset, labels, a, is_vit=False, n_grids=None)
    assert set(own_a.indices.flatten().tolist()) & {1, 6}  # per model, a uses images b gets wrong


def test_confidence_rule_orders_shared_images_by_the_mean_score():
    labels = torch.tensor([0, 0, 1, 1])
    logits = _logits(labels, wrong=[])[:, :2]
    eligible = torch.ones(4, dtype=torch.bool)
    score = torch.tensor([0.1, 0.9, 0.8, 0.2], dtype=torch.float64)  # image 1 and 2 first
    one_cell = replace(get_preset("bcos-v2"), grid_size_cnn=1)
    sel = select_grids(one_cell, labels, None, is_vit=False, n_grids=2, shared=(eligible, score))  # no logits
    assert sorted(sel.indices.flatten().tolist()) == [1, 2]
    assert sorted(select_by_confidence(labels, logits, grid_size=1, n_grids=2).indices.flatten().tolist()) == [0, 2]


def test_pairing_config_names_the_deciding_models_and_validates():
    models = ("a", "b")
    assert pairing_models(GridPGConfig(pairing="shared"), models) == models
    assert pairing_models(GridPGConfig(), models) == ()
    assert GridPGConfig(n_grids=0).n_grids == 0  # every selectable grid
    with pytest.raises(ValueError, match="pairing"):
        GridPGConfig(pairing="paired")


def test_shared_items_round_trip_and_digest(tmp_path):
    items = SharedItems(("a", "b"), torch.tensor([True, False]), torch.tensor([0.5, 0.25], dtype=torch.float64), {})
    save_shared(tmp_path, {"gridpg": items})
    back = load_shared(tmp_path)["gridpg"]
    assert back.models == ("a", "b") and torch.equal(back.eligible, items.eligible)
    assert shared_digest({"gridpg": back}) == shared_digest({"gridpg": items}) != ""
    other = SharedItems(("a", "b"), torch.tensor([True, True]), items.score, {})
    assert other.digest() != items.digest()
    assert shared_digest({}) == "" and load_shared(tmp_path / "none") == {}
    assert items.record()["n_eligible"] == 1


def test_a_run_with_shared_grids_explains_every_model_on_the_same_grids_and_resumes(tmp_path):
    import json

    from faithbench.bench.cli import main

    suite = tmp_path / "paired.toml"
    suite.write_text(
        'name = "paired"\ndescription = "t"\ndataset = "mnist"\nmodels = ["cnn_mnist", "bcos_cnn_mnist"]\n'
        'methods = ["gradient"]\ncontrols = false\nmetrics = ["gridpg"]\nseed = 0\nn_samples = 4\nbatch_size = 8\n'
        '[gridpg]\npreset = "bcos-v2"\npairing = "shared"\nn_grids = 2\n'
    )
    out = tmp_path / "run"
    assert main(["run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["shared"]["gridpg"]["models"] == ["cnn_mnist", "bcos_cnn_mnist"]
    assert (out / "shared.pt").is_file()
    samples = pd.read_csv(out / "samples.csv")
    ids = [sorted(part["sample_id"]) for _, part in samples.groupby("model")]
    assert ids[0] == ids[1] and len(ids[0]) == 18  # 2 grids x 9 cells, the same for both models
    assert set(samples["cluster_id"]) == {0, 1}
    results = pd.read_csv(out / "results.csv")
    assert set(results["n_clusters"]) == {2} and all('"pairing": "shared (2 models)"' in p for p in results["params"])
    units = sorted(p.stat().st_mtime_ns for p in (out / "units").glob("*.json"))
    assert main(["run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report"]) == 0
    assert sorted(p.stat().st_mtime_ns for p in (out / "units").glob("*.json")) == units  # resumed: none redone


def test_shared_by_build_shares_items_within_each_build_and_each_model_reads_its_builds():
    """``pairing = "shared-by-build"``: build K of every model decides build K's items (with three builds of three
    models, all nine deciding thinned the ALOE grids to 30 of the 48 asked); each model's units read its group's."""
    from types import SimpleNamespace

    from faithbench.bench.run.pairing import items_of, share_items
    from faithbench.bench.run.plan import MetricJob

    models = ("a", "b", "a@2", "b@2", "a@3", "b@3")
    # each model finds eligible the items whose index is not its own "weak" one: a@2 and b@2 both reject item 2
    weak = {"a": 0, "b": 1, "a@2": 2, "b@2": 2, "a@3": 3, "b@3": 4}
    spec = SimpleNamespace(
        eligibility=lambda model, images, labels, cfg, device, batch: (
            torch.arange(6) != weak[model.name],
            torch.full((6,), float(len(model.name))),
        )
    )
    job = MetricJob(name="m", spec=spec, config=None, deciders=models, by_build=True)
    assert job.groups() == {"m": ("a", "b"), "m@2": ("a@2", "b@2"), "m@3": ("a@3", "b@3")}
    assert replace(job, by_build=False).groups() == {"m": models} and replace(job, deciders=()).groups() == {}
    plan = SimpleNamespace(metrics=(job,))
    data = SimpleNamespace(images=torch.zeros(6, 1, 2, 2), labels=torch.zeros(6, dtype=torch.long))
    load = lambda name: SimpleNamespace(name=name, weights_sha256=f"w-{name}")  # noqa: E731
    shared = share_items(plan, data, torch.device("cpu"), load, lambda model: 8)
    assert shared["m"].eligible.tolist() == [False, False, True, True, True, True]
    assert shared["m@2"].eligible.tolist() == [True, True, False, True, True, True]  # only build 2's choice
    assert shared["m@3"].eligible.tolist() == [True, True, True, False, False, True]
    assert shared["m@2"].weights == {"a@2": "w-a@2", "b@2": "w-b@2"}
    assert items_of(shared, "b@2") == {"m": shared["m@2"]} and items_of(shared, "a") == {"m": shared["m"]}
    one = {"m": shared["m"]}  # one group (plain "shared"): every model reads it, a model outside it too
    assert items_of(one, "a@3") == one and items_of({"m": None}, "a") == {"m": None}  # the estimate's placeholders
    assert pairing_models(GridPGConfig(pairing="shared-by-build"), ("a", "b")) == ("a", "b")
