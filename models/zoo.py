"""The offline model zoo: real MNIST digits, a real pretrained CNN, and the models built from them.

Every recipe is deterministic (seeded) and cached as a checkpoint named by a content hash of the
recipe (its parameters, the hashes of the recipes it builds on, the zoo version). A checkpoint
that does not load, whose recipe hash differs, or whose weights do not match their stored
SHA-256 is reported and rebuilt. Cache folder: ``$FAITHBENCH_CACHE`` or ``~/.cache/faithbench``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from bcos.modules import LogitLayer
from torch import nn

from faithbench.io import atomic_torch_save
from faithbench.registry import Registry
from models.adapter import state_sha256
from models.aloe import AlignmentConfig, align
from models.architectures import ConvDigitNet, bcos_digit_cnn, ccexam_mnist_cnn, digit_vit
from models.bcosify import bcosify
from models.data import MNIST_MEAN, MNIST_STD, mnist_splits
from models.encoding import InputEncoding, bcos_inverse, normalized
from models.training import accuracy, build_numerics, train_classifier

ZOO_VERSION = 2

STANDARD = normalized(MNIST_MEAN, MNIST_STD)
BCOS = bcos_inverse(1)


def cache_dir() -> Path:
    return Path(os.environ.get("FAITHBENCH_CACHE", Path.home() / ".cache" / "faithbench")) / "zoo"


@dataclass(frozen=True)
class Recipe:
    """How to build one zoo model: an architecture, a way to train it, and its metadata."""

    name: str
    family: str
    description: str
    encoding: InputEncoding
    architecture: Callable[[], nn.Module]
    train: Callable[[nn.Module, dict[str, nn.Module], dict], dict]
    params: dict = field(default_factory=dict)
    depends: tuple[str, ...] = ()
    is_vit: bool = False
    activation: str = "softmax"
    logit_bias: float = 0.0
    conv_layer: str | None = None


# --------------------------------------------------------------------------- recipes


def _bcos_cnn_train(model: nn.Module, deps: dict, p: dict) -> dict:
    train, _ = mnist_splits()
    train_classifier(
        model, BCOS, train, epochs=p["epochs"], lr=p["lr"], seed=p["seed"], loss="bce", desc="bcos_cnn_mnist"
    )
    return {}


def _bcosify_cnn() -> nn.Module:
    return bcosify(ConvDigitNet(), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10)


def _bcosified_cnn_train(model: nn.Module, deps: dict, p: dict) -> dict:
    train, test = mnist_splits()
    converted = bcosify(deps["cnn_mnist"], image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10)
    model.load_state_dict(converted.state_dict())
    before = accuracy(model, BCOS, test)
    train_classifier(
        model,
        BCOS,
        train,
        epochs=p["epochs"],
        lr=p["lr"],
        seed=p["seed"],
        loss="bce",
        desc="bcosified_cnn_mnist",
    )
    return {"accuracy_before_finetuning": before}


def _vit_train(model: nn.Module, deps: dict, p: dict) -> dict:
    train, _ = mnist_splits()
    train_classifier(
        model,
        STANDARD,
        train,
        epochs=p["epochs"],
        lr=p["lr"],
        seed=p["seed"],
        shift=p["shift"],
        desc="vit_mnist",
    )
    return {}


def _aloe_architecture() -> nn.Module:
    student = bcosify(
        digit_vit(), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, first_layer="to_patch_embedding.linear"
    )
    return nn.Sequential(*student, LogitLayer(logit_bias=-math.log(9)))


def _aloe_train(model: nn.Module, deps: dict, p: dict) -> dict:
    train, _ = mnist_splits()
    teacher = deps["vit_mnist"]
    student = bcosify(
        teacher, image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, first_layer="to_patch_embedding.linear"
    )
    log = align(
        student,
        teacher,
        train.images,
        teacher_encode=STANDARD,
        student_encode=BCOS,
        cfg=AlignmentConfig(**p["alignment"]),
    )
    model[0].load_state_dict(student[0].state_dict())
    model[1].load_state_dict(student[1].state_dict())
    # Linear probe: only the (B-cos) head learns, from labels, with BCE.
    model.requires_grad_(False)
    head = list(model[1].linear_head.parameters())
    for q in head:
        q.requires_grad_(True)
    train_classifier(
        model,
        BCOS,
        train,
        epochs=p["probe_epochs"],
        lr=p["probe_lr"],
        seed=p["seed"],
        loss="bce",
        params=head,
        desc="aloe probe",
    )
    model.requires_grad_(True)
    return {"alignment": {k: v for k, v in log.items() if k != "log"}}


def _no_training(model: nn.Module, deps: dict, p: dict) -> dict:
    return {}


RECIPES: Registry[Recipe] = Registry("zoo model")
for _recipe in (
    Recipe(
        "cnn_mnist",
        "standard",
        "pretrained MNIST CNN shipped in ccexam 1.0.0 (FC head as convolutions, same function)",
        STANDARD,
        ccexam_mnist_cnn,
        _no_training,
        params={"weights": "ccexam==1.0.0 weights/mnist.pth"},
        conv_layer="features",
    ),
    Recipe(
        "bcos_cnn_mnist",
        "bcos",
        "B-cos CNN (B = 2, official bcos layers) trained from scratch, BCE",
        BCOS,
        bcos_digit_cnn,
        _bcos_cnn_train,
        params={"epochs": 4, "lr": 1e-3, "seed": 0},
        activation="sigmoid",
        logit_bias=-math.log(9),
        conv_layer="9",
    ),
    Recipe(
        "bcosified_cnn_mnist",
        "bcosified",
        "cnn_mnist B-cosified (B = 2, no biases, avg-pool) and fine-tuned 3 epochs with BCE",
        BCOS,
        _bcosify_cnn,
        _bcosified_cnn_train,
        params={"epochs": 3, "lr": 1e-3, "seed": 0},
        depends=("cnn_mnist",),
        activation="sigmoid",
        logit_bias=-math.log(9),
        conv_layer="1.features",
    ),
    Recipe(
        "vit_mnist",
        "standard",
        "ViT (6 blocks, dim 64, 7 px patches) trained from scratch; ALOE teacher",
        STANDARD,
        digit_vit,
        _vit_train,
        params={"epochs": 25, "lr": 2e-3, "seed": 0, "shift": 2},
        is_vit=True,
    ),
    Recipe(
        "aloe_vit_mnist",
        "aloe",
        "B-cosified copy of vit_mnist aligned label-free to it (ALOE), then a B-cos linear probe",
        BCOS,
        _aloe_architecture,
        _aloe_train,
        params={
            "alignment": {"max_epochs": 20, "lr": 1e-3, "seed": 0},
            "probe_epochs": 5,
            "probe_lr": 1e-2,
            "seed": 0,
        },
        depends=("vit_mnist",),
        is_vit=True,
        activation="sigmoid",
        logit_bias=-math.log(9),
    ),
):
    RECIPES.register(_recipe.name, _recipe)


# --------------------------------------------------------------------------- hashing and caching


def recipe_hash(name: str) -> str:
    r = RECIPES.get(name)
    payload = {
        "name": name,
        "zoo": ZOO_VERSION,
        "family": r.family,
        "params": r.params,
        "depends": {d: recipe_hash(d) for d in r.depends},
        "torch": torch.__version__.split("+")[0],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def checkpoint_path(name: str) -> Path:
    return cache_dir() / f"{name}-{recipe_hash(name)[:16]}.pt"


def _say(msg: str) -> None:
    print(f"[faithbench zoo] {msg}", file=sys.stderr)


def _load_checkpoint(name: str, model: nn.Module) -> dict | None:
    path = checkpoint_path(name)
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if ckpt.get("recipe_hash") != recipe_hash(name):
            raise ValueError("recipe hash differs")
        if state_sha256(ckpt["state_dict"]) != ckpt.get("state_sha256"):
            raise ValueError("weights do not match their stored SHA-256")
        model.load_state_dict(ckpt["state_dict"])
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is rebuilt
        _say(f"checkpoint {path} is corrupt or does not match its recipe ({exc}); rebuilding {name}")
        return None
    return ckpt["info"]


def _save_checkpoint(name: str, model: nn.Module, info: dict) -> None:
    path = checkpoint_path(name)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    atomic_torch_save(  # a killed build never leaves a half-written checkpoint
        path,
        {
            "recipe_hash": recipe_hash(name),
            "state_dict": state,
            "state_sha256": state_sha256(state),
            "info": info,
        },
    )


def build(name: str) -> tuple[nn.Module, dict]:
    """The trained module and its info for recipe ``name``, from cache or built now (CPU)."""
    r = RECIPES.get(name)
    torch.manual_seed(0)
    model = r.architecture()
    info = _load_checkpoint(name, model)
    if info is None:
        deps = {d: build(d)[0] for d in r.depends}
        _say(f"building {name}: {r.description}")
        with build_numerics() as numerics:
            extra = r.train(model, deps, r.params)
        extra["build_numerics"] = numerics
        model.eval()
        _, test = mnist_splits()
        info = {
            "test_accuracy": accuracy(model, r.encoding, test),
            "n_test": len(test.labels),
            "recipe_hash": recipe_hash(name),
            **extra,
        }
        _say(f"{name}: held-out accuracy {info['test_accuracy']:.4f}")
        _save_checkpoint(name, model, info)
    return model.eval(), info
