"""Further builds of a zoo model (``NAME@K``): their names, their recipes (seeds shifted, dependencies followed), the
registries that find them without listing them, a suite's ``builds`` key and a build trained for real."""

import pytest
import torch

from faithbench.bench.run.suite import build_suite
from faithbench.build_names import build_name, split_build
from faithbench.errors import UserError
from faithbench.models import MODELS, zoo
from faithbench.models.zoo.builds import build_of, derived_recipe, init_seed
from tests.models.test_zoo import tiny_recipe


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cnn_gap_mnist", ("cnn_gap_mnist", 1)),
        ("cnn_gap_mnist@2", ("cnn_gap_mnist", 2)),
        ("cnn_gap_mnist@12", ("cnn_gap_mnist", 12)),
        ("cnn_gap_mnist@1", ("cnn_gap_mnist@1", 0)),  # build 1 is the name itself
        ("cnn_gap_mnist@02", ("cnn_gap_mnist@02", 0)),
        ("cnn_gap_mnist@x", ("cnn_gap_mnist@x", 0)),
        ("@2", ("@2", 0)),
    ],
)
def test_build_names(name, expected):
    assert split_build(name) == expected
    if expected[1] >= 1:
        assert build_name(*expected) == name


def test_a_build_shifts_every_seed_and_follows_its_dependencies():
    base = zoo.RECIPES.get("aloe_vit_mnist")
    third = build_of(base, 3)
    assert third.name == "aloe_vit_mnist@3" and third.depends == tuple(f"{d}@3" for d in base.depends)
    assert third.params["seed"] == base.params["seed"] + 2
    assert third.params["alignment"]["seed"] == base.params["alignment"]["seed"] + 2  # nested seeds too
    assert {k: v for k, v in third.params.items() if k not in ("seed", "alignment")} == {
        k: v for k, v in base.params.items() if k not in ("seed", "alignment")
    }
    assert build_of(base, 1) is base and init_seed(base) == 0 and init_seed(third) == 2
    assert zoo.recipe_hash("aloe_vit_mnist@3") != zoo.recipe_hash("aloe_vit_mnist")
    assert derived_recipe(zoo.RECIPES, "cnn_mnist@2") is None  # shipped pretrained weights: no further builds
    assert derived_recipe(zoo.RECIPES, "cnn_gap_mnist@2@2") is None


def test_builds_are_found_by_name_and_never_listed():
    listed = len(MODELS)
    assert "bcosified_cnn_gap_mnist@2" in MODELS and "cnn_mnist@2" not in MODELS
    spec = MODELS.get("bcosified_cnn_gap_mnist@2")
    assert spec.name == "bcosified_cnn_gap_mnist@2" and spec.source == "zoo" and "build 2" in spec.description
    assert len(MODELS) == listed and "bcosified_cnn_gap_mnist@2" not in MODELS.names()
    with pytest.raises(UserError, match="unknown model 'cnn_mnist@2'"):
        MODELS.get("cnn_mnist@2")


def test_a_suite_runs_builds_of_its_zoo_models():
    data = {
        "name": "b",
        "models": ["cnn_gap_mnist", "bcosified_cnn_gap_mnist"],
        "methods": ["native"],
        "metrics": ["entropy"],
        "builds": 3,
    }
    suite = build_suite(data)
    assert suite.builds == 3 and suite.models == (
        *("cnn_gap_mnist", "cnn_gap_mnist@2", "cnn_gap_mnist@3"),
        *("bcosified_cnn_gap_mnist", "bcosified_cnn_gap_mnist@2", "bcosified_cnn_gap_mnist@3"),
    )
    assert build_suite({**data, "models": list(suite.models)}).models == suite.models  # a recorded suite: as listed
    assert build_suite({**data, "builds": 1}).models == ("cnn_gap_mnist", "bcosified_cnn_gap_mnist")
    with pytest.raises(UserError, match="model 'cnn_mnist' has no further builds"):
        build_suite({**data, "models": ["cnn_mnist"]})
    with pytest.raises(UserError, match="builds must be >= 1"):
        build_suite({**data, "builds": 0})


def test_a_second_build_trains_from_its_own_seed(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path))
    zoo.RECIPES.register("tiny", tiny_recipe(calls))
    try:
        first, _ = zoo.build("tiny")
        second, info = zoo.build("tiny@2")
        assert [c["seed"] for c in calls] == [0, 1] and zoo.checkpoint_path("tiny@2").exists()
        assert not torch.equal(first[1].weight, second[1].weight)
        again, _ = zoo.build("tiny@2")  # cached: loaded, not trained again
        assert len(calls) == 2 and torch.equal(again[1].weight, second[1].weight)
        assert len(info["test_correct"]) == info["n_test"]
    finally:
        zoo.RECIPES.unregister("tiny")
    assert "tiny@2" not in zoo.RECIPES
