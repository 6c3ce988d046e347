"""``python -m bench perf``: the harness at tiny sizes (timings are not asserted, only what they mean)."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import faithbench.bench.perf.harness as perf
from faithbench.bench.cli import main
from faithbench.bench.perf.harness import PerfCase, PerfSizes, run_perf
from faithbench.bench.perf.quantus import agreement, flip_steps
from faithbench.errors import UserError

REQUIRED = [
    "what", "implementation", "model", "device", "n_images", "seconds", "images_per_s", "model_calls",
    "ratio_to_quantus", "ratio_to_limit", "peak_memory_mb", "agrees",
]  # fmt: skip
TINY = PerfSizes(
    repeats=1,
    warmup=0,
    fractions=(0.0, 0.25, 0.5),
    erasure_fractions=(0.1, 0.5),
    flip_steps=3,
    regions=3,
    n_quantus=2,
    chunk_size=8,
    method_params={"integrated_gradients": {"n_steps": 2}, "lime": {"n_samples": 4}},
)
# 48 px: 3 divides 48², so Quantus PixelFlipping can flip whole RGB pixels; 16 px blocks: 9 regions.
CASES = (
    PerfCase("resnet18", 48, 4, 16, ("gradient", "integrated_gradients", "native")),
    PerfCase("bcos_cnn_mnist", 28, 4, 4, ("native", "lime")),
)


@pytest.fixture(autouse=True)
def one_thread():
    """One thread: a shared 2-core CPU with two threads per process slows everything down many times."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("quantus")
    out = tmp_path_factory.mktemp("perf")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = run_perf("cpu", cases=CASES, sizes=TINY, out=out)
    finally:
        torch.set_num_threads(before)
    return run, out


def test_the_csv_has_every_column_and_one_row_per_measurement(tiny):
    run, out = tiny
    table = pd.read_csv(out / "perf.csv")
    assert set(REQUIRED) <= set(table.columns)
    assert len(table) == len(run.table) and (table["seconds"] > 0).all()
    assert set(table["implementation"]) == {"faithbench", "quantus", "limit"}
    assert table["peak_memory_mb"].isna().all()  # CPU: PyTorch keeps no allocator statistics
    meta = json.loads((out / "perf.json").read_text())
    assert meta["provenance"]["device"].startswith("cpu") and meta["sizes"]["n_quantus"] == 2
    # native refuses the standard ResNet (a note, no row); the B-cos CNN runs it
    methods = table[table["kind"] == "method"]
    assert set(methods.loc[methods["model"] == "resnet18", "what"]) == {
        "forward+backward",
        "gradient",
        "integrated_gradients",
    }
    assert "native" in set(methods.loc[methods["model"] == "bcos_cnn_mnist", "what"])
    assert any("'native' cannot explain model 'resnet18'" in n for n in run.notes)


def test_faithbench_and_quantus_agree_on_every_quantus_row(tiny):
    table = tiny[0].table
    quantus = table[table["implementation"] == "quantus"]
    per_model = {m: set(g["what"]) for m, g in quantus.groupby("model")}
    paired = {
        "deletion (PixelFlipping)",
        "deletion (RegionPerturbation)",
        "grid_pointing_game",
        "explanation_entropy",
        "gini_index",
    }
    assert per_model == {"resnet18": paired, "bcos_cnn_mnist": paired}
    assert quantus["agrees"].astype(bool).all() and (quantus["n_images"] == 2).all()
    ours = table[(table["implementation"] == "faithbench") & table["what"].isin(paired)]
    assert ours["agrees"].astype(bool).all() and (ours["ratio_to_quantus"] > 0).all()
    assert (quantus.loc[quantus["what"] == "explanation_entropy", "model_calls"] == 0).all()


def test_the_limit_makes_the_same_model_calls_as_the_metric(tiny):
    table = tiny[0].table
    metrics = table[table["kind"] == "metric"]
    limits = metrics[metrics["implementation"] == "limit"]
    assert len(limits) == 2 * 5  # deletion, insertion, comp/suff and both Quantus-paired deletions, per model
    for _, limit in limits.iterrows():
        ours = metrics[
            (metrics["implementation"] == "faithbench")
            & (metrics["what"] == limit["what"])
            & (metrics["model"] == limit["model"])
        ].iloc[0]
        assert (ours["model_calls"], ours["model_inputs"]) == (limit["model_calls"], limit["model_inputs"])
        assert ours["model_calls"] > 0 and ours["ratio_to_limit"] > 0
    # deletion of 4 images at 3 fractions, at most 8 inputs per call: 12 inputs in calls of 8 and 4
    row = metrics[(metrics["what"] == "pixel_deletion") & (metrics["model"] == "resnet18")].iloc[0]
    assert (row["model_calls"], row["model_inputs"]) == (2, 12)


def test_a_disagreeing_pair_gets_no_ratio(monkeypatch):
    pytest.importorskip("quantus")
    monkeypatch.setattr("faithbench.bench.perf.timing.agreement", lambda ours, theirs: (False, 1.0))
    case = PerfCase("bcos_cnn_mnist", 28, 2, 4, ())
    table = run_perf("cpu", cases=[case], sizes=TINY).table
    paired = table[table["agrees"].notna()]
    assert len(paired) == 10 and not paired["agrees"].astype(bool).any()
    assert paired["ratio_to_quantus"].isna().all()


def test_agreement_and_pixel_flipping_steps():
    assert agreement(torch.tensor([0.5, 0.25]), [0.5, 0.25 + 1e-9]) == (True, pytest.approx(1e-9))
    assert not agreement(torch.tensor([0.5, 0.25]), [0.5, 0.26])[0]
    assert not agreement(torch.tensor([0.5, 0.25]), [0.5])[0]
    assert flip_steps(224 * 224, 3, 16) is None  # 3 does not divide 224²: no whole-pixel RGB steps
    assert flip_steps(28 * 28, 2, 16) == 16 and flip_steps(96 * 96, 3, 6) == 6 and flip_steps(48 * 48, 3, 4) == 6


def test_an_unknown_device_fails_with_one_clear_line(capsys):
    with pytest.raises(UserError, match="unknown device 'tpu'"):
        run_perf("tpu")
    assert main(["perf", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown device 'tpu'")
    assert main(["perf", "--device", "cpu", "--repeats", "0"]) == 2
    assert "repeats must be a positive integer" in capsys.readouterr().err


def test_the_command_line_without_quantus(tmp_path, monkeypatch, capsys):
    # --quick with its sizes shrunk, and Quantus "missing": the rest runs and a note says why.
    monkeypatch.setattr(perf, "QUICK_CASES", (PerfCase("bcos_cnn_mnist", 28, 2, 4, ("gradient",)),))
    monkeypatch.setattr(perf, "QUICK_SIZES", replace(TINY, repeats=2))
    monkeypatch.setattr(
        "faithbench.bench.perf.harness.import_quantus", lambda: (None, "quantus is not importable (test)")
    )
    assert main(["perf", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "note: quantus is not importable (test)" in out and "pixel_deletion" in out
    table = pd.read_csv(tmp_path / "perf.csv")
    assert "quantus" not in set(table["implementation"]) and np.isnan(table["ratio_to_quantus"]).all()
    assert set(table["what"]) >= {"pixel_deletion", "forward+backward", "gradient"}
