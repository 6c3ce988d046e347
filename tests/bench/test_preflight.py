"""Checks before compute: a bad setting, data root or absent weight file is one line before the run makes a folder,
and the dry run lists them (issue: a missing weight used to fail at the first unit and leave the lock behind)."""

from __future__ import annotations

import urllib.error
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from faithbench.bench.cli import main
from faithbench.bench.run.data import class_index_for, load_data
from faithbench.bench.run.preflight import absent_weights, readiness
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite, load_suite
from faithbench.errors import UserError
from faithbench.models import MODELS
from faithbench.models.data.datasets import class_indices


def _suite(**keys):
    data = {"name": "pf", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["entropy"], "n_samples": 2}
    return build_suite({**data, **keys}, "test")


def _image_folder(root: Path) -> Path:
    for c in ("n01440764", "n01443537"):
        (root / c).mkdir(parents=True)
        Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype("uint8")).save(root / c / "0.JPEG")
    return root


def test_a_bad_setting_stops_the_run_before_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("FAITHBENCH_CLAIM_STALE_S", "abc")
    with pytest.raises(UserError, match="FAITHBENCH_CLAIM_STALE_S='abc': expected a number of seconds"):
        run(_suite(), tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()  # no .lock, .lock-join or claims/ left behind


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_a_data_root_that_cannot_be_read_stops_the_run_before_its_folder(tmp_path, make):
    root = tmp_path / "images"
    if make == "empty":
        (root / "n01440764").mkdir(parents=True)  # a class folder without an image
    elif make == "file":
        root.write_text("not a folder")
    suite = _suite(models=["resnet50_random"], dataset="imagefolder", data_root=str(root))
    with pytest.raises(UserError, match=f"data root {root} \\(--data-root, or data_root in a suite file\\)"):
        run(suite, tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def test_an_absent_weight_file_is_one_line_before_the_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    suite = _suite(models=["resnet18"], dataset="imagefolder", data_root=str(_image_folder(tmp_path / "images")))
    where = absent_weights(suite.models)["resnet18"]
    assert where.path == tmp_path / "torch" / "hub" / "checkpoints" / "resnet18-f37072fd.pth"

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr("torchvision.models._api.load_state_dict_from_url", offline)  # offline, on any CI machine
    with pytest.raises(UserError, match=f"could not load torchvision resnet18 .*download .* into {where.path.parent}/"):
        run(suite, tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()
    _, stops, _ = readiness([suite])
    assert stops == [f"model resnet18: weights not on this machine ({where.path}): {where.fetch}"]
    where.path.parent.mkdir(parents=True)
    where.path.write_bytes(b"")  # present: the dry run does not load it
    assert readiness([suite]) == ([], [], [])


def test_the_dry_run_lists_every_problem_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv("FAITHBENCH_BCOSIFICATION_DIR", str(tmp_path / "bcosification"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    code = main(
        ["run", "--suite", "imagenet", "--data-root", str(tmp_path / "none"), "--dry-run", "--out", str(tmp_path / "o")]
    )
    out = capsys.readouterr().out
    assert code == 1 and not (tmp_path / "o").exists()
    stops = out.split("not ready to run here (")[1]
    assert stops.startswith(f"9; a real run stops before making {tmp_path / 'o'}):")
    assert f"data root {tmp_path / 'none'} (--data-root, or data_root in a suite file) does not exist" in stops
    for name in load_suite("imagenet").models:
        assert f"model {name}: weights not on this machine ({MODELS.get(name).weight_file().path})" in stops
    assert str(tmp_path / "bcosification" / "ImageNet") in stops and str(tmp_path / "hf" / "models--rmaser--") in stops


def test_the_dry_run_names_the_zoo_builds_to_come(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "cache"))  # an empty zoo: every model still to build
    assert (
        main(["run", "--models", "bcosified_cnn_mnist", "--methods", "gradient", "--metrics", "entropy", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    assert "zoo models to build first (2; trained on this machine, then cached): cnn_mnist, bcosified_cnn_mnist" in out
    assert "checks before compute: settings, data and weights all in place" in out


def test_a_suite_files_data_root_is_read_beside_it(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "suite.toml").write_text(
        'name = "mine"\nmodels = ["resnet50_random"]\nmethods = ["gradient"]\nmetrics = ["entropy"]\n'
        'dataset = "imagefolder"\ndata_root = "images"\n'
    )
    assert load_suite(str(folder / "suite.toml")).data_root == str(folder.resolve() / "images")
    absolute = tmp_path / "elsewhere"
    (folder / "suite.toml").write_text((folder / "suite.toml").read_text().replace('"images"', f'"{absolute}"'))
    assert load_suite(str(folder / "suite.toml")).data_root == str(absolute)


def test_synset_folders_keep_their_imagenet_labels(tmp_path):
    # a subset of ImageNet: sorted positions would label n01484850 (great white shark, class 2) 0 and n15075141
    # (toilet tissue, class 999) 1; the synset names keep the labels
    root = tmp_path / "images"
    for c in ("n01484850", "n15075141"):
        (root / c).mkdir(parents=True)
        Image.fromarray(np.zeros((32, 32, 3), dtype="uint8")).save(root / c / "0.JPEG")
    folders = sorted(p.name for p in root.iterdir())
    assert class_indices(folders, "imagenet") == ([2, 999], "imagenet")
    assert class_indices(folders, "auto") == ([2, 999], "imagenet")
    assert class_indices(folders, "sorted") == ([0, 1], "sorted")
    assert class_indices(["n01484850", "cats"], "auto") == ([0, 1], "sorted")  # not all synsets: positions
    with pytest.raises(UserError, match="class_index 'imagenet': 1 of 2 class folders are not ImageNet-1k synsets"):
        class_indices(["n01484850", "cats"], "imagenet")
    listing = tmp_path / "classes.txt"
    listing.write_text("n15075141\nn01484850\n")
    assert class_indices(folders, str(listing)) == ([1, 0], f"file {listing}")
    registry = _suite(models=["resnet50_random"], dataset="imagefolder", data_root=str(root))
    assert load_data(registry).labels.tolist() == [2, 999]  # an ImageNet classifier reads ImageNet indices
    own = _suite(dataset="imagefolder", data_root=str(root), models=["resnet50_random"], class_index="sorted")
    assert load_data(own).labels.tolist() == [0, 1]
    assert class_index_for(replace(registry, models=("cnn_mnist",))) == "sorted"  # not an ImageNet classifier
    bad = _suite(models=["resnet50_random"], dataset="imagefolder", data_root=str(root), class_index="nope")
    assert readiness([bad])[0] == [
        "pf: class_index 'nope' is none of auto, sorted, imagenet and no file (one class folder name per line, line i "
        "= class index i)"
    ]
    assert readiness([_suite(class_index="sorted")])[0] == [
        "pf: class_index applies to class-folder data (imagefolder), not 'mnist'"
    ]


def test_a_gpu_plan_of_imagenet_models_states_memory_and_disk(tmp_path, capsys):
    # a registry model's architecture is measured at its own size (seeded random weights, no download): its memory per
    # input with gradients, and the plan says the GPU's call sizes are found at run time
    suite = tmp_path / "mem.toml"
    suite.write_text(
        'name = "mem"\ndataset = "imagefolder"\nmodels = ["resnet50"]\nmethods = ["input_x_gradient"]\n'
        'metrics = ["gridpg", "pixel_deletion"]\nn_samples = 16\nbatch_size = 16\n[gridpg]\npreset = "bcos-v2"\n'
    )
    root = _image_folder(tmp_path / "images")
    args = ["run", "--suite", str(suite), "--data-root", str(root), "--dry-run", "--out", str(tmp_path / "o")]
    main([*args, "--device", "cuda"])
    out = capsys.readouterr().out
    assert "MB an input ≈" in out
    flat = " ".join(out.split())
    assert "at most 16,384 inputs a model call: where each model's calls start on a GPU, halving where" in flat
    assert "found at run time" in flat and "! resnet50" not in flat  # one input fits an 80 GiB GPU
    assert f"GiB free at {tmp_path}" in flat and "the run keeps every unit's attribution maps" in flat
    assert "time: none for cuda (counts are not seconds)" in flat
