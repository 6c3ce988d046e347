"""Zoo caching (content-hashed, corrupt/mismatched checkpoints rebuilt) and the model registry."""

import urllib.error

import pytest
import torch
import torchvision
from torch import nn

from faithbench.errors import UserError
from faithbench.models import MODELS, load_model, zoo
from faithbench.models.zoo import Recipe
from faithbench.models.zoo.training import BUILD_THREADS


def tiny_recipe(calls: list, lr: float = 0.5) -> Recipe:
    def architecture() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))

    def train(model: nn.Module, deps: dict, params: dict) -> dict:
        calls.append(params)
        torch.manual_seed(params["seed"])
        with torch.no_grad():
            model[1].weight.normal_(0, params["lr"])
        return {"note": "tiny"}

    return Recipe(
        name="tiny",
        family="standard",
        description="a tiny test model",
        encoding=zoo.STANDARD,
        architecture=architecture,
        train=train,
        params={"seed": 0, "lr": lr},
    )


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path))
    zoo.RECIPES.register("tiny", tiny_recipe(calls))
    yield calls
    zoo.RECIPES.unregister("tiny")


def test_build_caches_and_reloads_without_training(tiny):
    model, info = zoo.build("tiny")
    assert len(tiny) == 1 and zoo.checkpoint_path("tiny").exists()
    assert info["note"] == "tiny" and 0 <= info["test_accuracy"] <= 1 and info["n_test"] == 1000
    # the per-item results behind the accuracy, one 0/1 per held-out image in the split's order (paired claims)
    assert len(info["test_correct"]) == 1000 and set(info["test_correct"]) <= {"0", "1"}
    assert info["test_correct"].count("1") / 1000 == pytest.approx(info["test_accuracy"], abs=1e-6)
    again, info2 = zoo.build("tiny")
    assert len(tiny) == 1, "a cached model was trained again"
    assert info2 == info
    for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_training_is_deterministic(tiny, tmp_path, monkeypatch):
    first, _ = zoo.build("tiny")
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "other"))
    second, _ = zoo.build("tiny")
    assert len(tiny) == 2
    assert zoo.state_sha256(first.state_dict()) == zoo.state_sha256(second.state_dict())


def test_builds_use_a_fixed_thread_count_and_record_their_numerics(tiny, monkeypatch):
    """CPU kernels split reductions by thread count: a build must not depend on the machine's cores."""
    monkeypatch.delenv("FAITHBENCH_BUILD_THREADS", raising=False)
    seen = []
    recipe = zoo.RECIPES.get("tiny")
    zoo.RECIPES.unregister("tiny")
    zoo.RECIPES.register(
        "tiny", Recipe(**{**recipe.__dict__, "train": lambda m, d, p: seen.append(torch.get_num_threads()) or {}})
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, info = zoo.build("tiny")
        assert torch.get_num_threads() == 1, "the caller's thread count was not restored"
    finally:
        torch.set_num_threads(before)
    assert seen == [BUILD_THREADS]
    assert info["build_numerics"]["threads"] == BUILD_THREADS
    assert info["build_numerics"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_corrupt_checkpoint_is_reported_and_rebuilt(tiny, capsys):
    zoo.build("tiny")
    zoo.checkpoint_path("tiny").write_bytes(b"not a checkpoint")
    zoo.build("tiny")
    assert len(tiny) == 2
    assert "corrupt or does not match" in capsys.readouterr().err
    zoo.build("tiny")
    assert len(tiny) == 2  # the rebuilt checkpoint is good


def test_tampered_weights_are_detected(tiny, capsys):
    zoo.build("tiny")
    path = zoo.checkpoint_path("tiny")
    ckpt = torch.load(path, weights_only=True)
    ckpt["state_dict"]["1.bias"] += 1.0
    torch.save(ckpt, path)
    zoo.build("tiny")
    assert len(tiny) == 2 and "SHA-256" in capsys.readouterr().err


def test_a_changed_recipe_gets_a_new_checkpoint(tiny, monkeypatch):
    zoo.build("tiny")
    old = zoo.checkpoint_path("tiny")
    zoo.RECIPES.unregister("tiny")
    zoo.RECIPES.register("tiny", tiny_recipe(tiny, lr=0.1))
    assert zoo.checkpoint_path("tiny") != old
    zoo.build("tiny")
    assert len(tiny) == 2


def test_recipe_hash_covers_dependencies():
    h = zoo.recipe_hash("aloe_vit_mnist")
    assert h == zoo.recipe_hash("aloe_vit_mnist") and len(h) == 64
    assert zoo.RECIPES["aloe_vit_mnist"].depends == ("vit_mnist",)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(KeyError, match=r"unknown model 'resnet9' \(did you mean .*resnet18.*\); `python -m bench list"):
        load_model("resnet9")
    with pytest.raises(KeyError, match="unknown zoo model"):
        zoo.build("resnet9")


def test_registry_covers_the_four_families():
    families = {MODELS.get(n).family for n in MODELS}
    assert families == {"standard", "bcos", "bcosified", "aloe"}
    assert {
        "cnn_mnist",
        "bcos_cnn_mnist",
        "bcosified_cnn_mnist",
        "vit_mnist",
        "aloe_vit_mnist",
        "resnet18",
        "bcos_resnet18",
    } <= set(MODELS)


@pytest.mark.parametrize("name", ["resnet18", "bcos_resnet18"])
def test_pretrained_downloads_fail_offline_with_a_clear_message(monkeypatch, name):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no internet")

    # Both download paths, so the test never touches the network.
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    monkeypatch.setattr(torchvision.models._api, "load_state_dict_from_url", offline)
    with pytest.raises(UserError, match="could not load .*no internet.*checkpoints.*offline zoo model"):
        load_model(name)


def test_the_build_thread_count_can_be_set_on_purpose(monkeypatch):
    """FAITHBENCH_BUILD_THREADS builds a zoo under other numerics (e.g. to test that nothing depends on one build's
    bits); anything but a positive whole number is refused."""
    from faithbench.models.zoo.training import build_numerics, build_threads

    monkeypatch.setenv("FAITHBENCH_BUILD_THREADS", "1")
    with build_numerics() as numerics:
        assert torch.get_num_threads() == 1 and numerics["threads"] == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("FAITHBENCH_BUILD_THREADS", bad)
        with pytest.raises(ValueError, match="FAITHBENCH_BUILD_THREADS"):
            build_threads()
