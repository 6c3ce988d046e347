"""One question, one number: the command line without --suite, a suite file and benchmark() build the same suite
from the same defaults (data-derived ones resolved for the data, controls and tiers off unless asked for)."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest
import torch

import faithbench
from faithbench.attributions.perturbation import resolve_segmentation
from faithbench.bench.cli import main
from faithbench.bench.cli.parser import build_parser
from faithbench.bench.cli.run import run_suite
from faithbench.bench.report.build import _summary
from faithbench.bench.run.question import infer_dataset, question
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UserError
from faithbench.metrics.deletion import pixel_deletion

VARYING = {"suite", "explain_time_s", "metric_time_s", "peak_memory_mb", "piece_time_s", "created_utc"}


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def test_the_same_question_gives_the_same_bytes_from_the_cli_a_suite_file_and_python(tmp_path):
    ask = ["--models", "cnn_mnist", "--methods", "gradient", "--metrics", "pixel_deletion", "--n-samples", "6"]
    assert main(["run", *ask, "--out", str(tmp_path / "cli"), "--no-progress", "--no-report"]) == 0
    toml = tmp_path / "mine.toml"
    toml.write_text('name = "mine"\nmodels = ["cnn_mnist"]\nmethods = ["gradient"]\nmetrics = ["pixel_deletion"]\n'
                    "n_samples = 6\n")  # fmt: skip
    assert main(["run", "--suite", str(toml), "--out", str(tmp_path / "toml"), "--no-progress", "--no-report"]) == 0
    faithbench.benchmark(["cnn_mnist"], ["gradient"], ["pixel_deletion"], n_samples=6, out=tmp_path / "py")
    tables = {k: pd.read_csv(tmp_path / k / "results.csv") for k in ("cli", "toml", "py")}
    assert len(tables["cli"]) == 1  # no controls, no tier
    keep = [c for c in tables["cli"].columns if c not in VARYING]
    texts = {k: t[keep].to_csv(index=False) for k, t in tables.items()}
    assert texts["cli"] == texts["toml"] == texts["py"]
    samples = {k: (tmp_path / k / "samples.csv").read_bytes() for k in tables}
    assert samples["cli"] == samples["toml"] == samples["py"]
    assert '"block_size": 2' in tables["py"]["params"][0]  # 28 px digits: 14 x 14 blocks


def test_block_size_follows_the_image_side_and_a_degenerate_one_is_refused():
    def deletion(dataset: str, **table: object):
        data = question(["cnn_mnist"], ["gradient"], ["pixel_deletion", "morf"], dataset=dataset)
        if table:
            data["deletion"] = table
        return build_suite(data, "test").configs

    configs = deletion("mnist")
    assert configs["deletion"].block_size == 2 and configs["flipping"].block_size == 2
    assert deletion("mnist", block_size=4)["deletion"].block_size == 4
    with pytest.raises(UserError, match=r"\[deletion\] on dataset 'mnist': block_size 16 cuts the 28 px images into "
                       r"4 block\(s\), fewer than 8.*block_size <= 13 .*default for 28 px: 2\)"):  # fmt: skip
        deletion("mnist", block_size=16)


def test_the_metric_functions_take_the_same_default_block():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 3))
    x, a, y = torch.rand(3, 1, 28, 28), torch.rand(3, 28, 28), torch.tensor([0, 1, 2])
    auto = pixel_deletion(net, x, a, y).values
    assert torch.equal(auto, pixel_deletion(net, x, a, y, block_size=2).values)
    assert not torch.equal(auto, pixel_deletion(net, x, a, y, block_size=16).values)


def test_lime_segments_by_image_size():
    assert resolve_segmentation("auto", 28, 28) == "slic"
    assert resolve_segmentation("auto", 224, 224) == "quickshift"
    assert resolve_segmentation("patches", 28, 28) == "patches"


def test_controls_and_tiers_are_off_unless_asked_for_everywhere():
    bare = {"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["entropy"]}
    assert build_suite(bare, "file").controls == ()
    asked = run_suite(_args("--models", "cnn_mnist", "--methods", "gradient", "--metrics", "entropy"))
    assert (asked.controls, asked.tiers, asked.name) == ((), (), "question")
    assert run_suite(_args("--models", "cnn_mnist", "--controls")).controls  # all of them
    named = run_suite(_args("--models", "cnn_mnist", "--controls", "random,uniform"))
    assert named.controls == ("random", "uniform")
    default = run_suite(_args())  # the embedded default states both
    assert default.name == "vision" and default.controls and default.tiers == ("truth",)
    narrowed = run_suite(_args("--suite", "vision", "--models", "cnn_mnist", "--no-tiers", "--no-controls"))
    assert (narrowed.controls, narrowed.tiers) == ((), ())
    with pytest.raises(UserError, match="--controls and --no-controls"):
        run_suite(_args("--controls", "--no-controls"))


def test_a_question_fills_its_gaps_from_the_default_suite_of_its_data():
    assert infer_dataset(["cnn_gap_animal"]) == "animal-mnist"
    assert infer_dataset(["resnet18"], "/data") == "imagefolder"
    assert infer_dataset(["resnet18"]) == "mnist"
    suite = run_suite(_args("--models", "minilm_rt", "--metrics", "entropy"))
    assert suite.dataset == "rotten-tomatoes" and "native" in suite.methods and suite.models == ("minilm_rt",)


def test_the_report_says_which_controls_and_tiers_ran():
    results = pd.DataFrame({"model": ["m", "m"], "method": ["gradient", "random"], "metric": ["entropy"] * 2})
    line = _summary(results, {"suite": {"tiers": ["truth"]}})
    assert "controls: random; tiers: truth" in line
    assert "controls: none; tiers: none" in _summary(results.iloc[:1], {"suite": {}})
