"""The offline model zoo: real MNIST digits, a real pretrained CNN, and the models built from them.

A zoo model is one entry of :mod:`faithbench.models.zoo.entries` (add yours there), built by a factory of
:mod:`faithbench.models.zoo.recipes`; this module hashes, caches and builds them.

Every recipe is deterministic (seeded) and cached as a checkpoint named by a content hash of the
recipe (its parameters, the hashes of the recipes it builds on, the zoo version). A checkpoint
that does not load, whose recipe hash differs, or whose weights do not match their stored
SHA-256 is reported and rebuilt. Cache folder: ``$FAITHBENCH_CACHE`` or ``~/.cache/faithbench``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from faithbench.errors import UserError
from faithbench.io import atomic_torch_save
from faithbench.models.adapter import predict_logits, state_sha256
from faithbench.models.data.splits import image_splits
from faithbench.models.zoo.builds import init_seed
from faithbench.models.zoo.entries import RECIPES
from faithbench.models.zoo.recipes import BCOS, STANDARD, Recipe
from faithbench.models.zoo.training import build_label, build_numerics, held_out_record, training_snapshot
from faithbench.models.zoo.training import say as _say
from faithbench.progress import clock_text, silenced

__all__ = [
    "BCOS",
    "RECIPES",
    "STANDARD",
    "ZOO_VERSION",
    "Recipe",
    "build",
    "build_missing",
    "cache_dir",
    "missing",
    "recipe_hash",
]

ZOO_VERSION = 2


def cache_dir() -> Path:
    root = Path(os.environ.get("FAITHBENCH_CACHE", Path.home() / ".cache" / "faithbench"))
    if root.exists() and not root.is_dir():
        raise UserError(f"the cache {root} (FAITHBENCH_CACHE) is a file, not a folder; name a folder")
    return root / "zoo"


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
        frozen = RECIPES.get(name).frozen  # kept as the architecture sets them: not in the checkpoint
        if frozen and _frozen_sha256(model, frozen) != ckpt.get("frozen_sha256"):
            raise ValueError(f"the starting point's {', '.join(frozen)} differ from the ones it was trained with")
        keys = model.load_state_dict(ckpt["state_dict"], strict=not frozen)
        if sorted(keys.missing_keys) != sorted(frozen) or keys.unexpected_keys:
            raise ValueError(f"the weights do not fit: missing {keys.missing_keys}, unexpected {keys.unexpected_keys}")
    except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is rebuilt
        _say(f"checkpoint {path} is corrupt or does not match its recipe ({exc}); rebuilding {name}")
        return None
    return ckpt["info"]


def _frozen_sha256(model: nn.Module, frozen: tuple[str, ...]) -> str:
    """The SHA-256 of the parameters a checkpoint leaves out (the package that supplies them could change)."""
    state = model.state_dict()
    return state_sha256({k: state[k] for k in frozen})  # (state_sha256 reads each tensor's bytes on the CPU)


def _save_checkpoint(name: str, model: nn.Module, info: dict) -> None:
    path = checkpoint_path(name)
    frozen = RECIPES.get(name).frozen
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if k not in frozen}
    atomic_torch_save(  # a killed build never leaves a half-written checkpoint
        path,
        {
            "recipe_hash": recipe_hash(name),
            "state_dict": state,
            "state_sha256": state_sha256(state),
            "info": info,
            **({"frozen_sha256": _frozen_sha256(model, frozen)} if frozen else {}),
        },
    )


def held_out_accuracy(recipe: Recipe, model: nn.Module) -> dict:
    if recipe.held_out is not None:
        return recipe.held_out(model)
    _, test = image_splits(recipe.dataset)
    return held_out_record(predict_logits(model, recipe.encoding, test.images).argmax(1) == test.labels)


def build(name: str) -> tuple[nn.Module, dict]:
    """The trained module and its info for recipe ``name``, from cache or built now (CPU)."""
    r = RECIPES.get(name)
    torch.manual_seed(init_seed(r))  # 0 for build 1 of every recipe; build K's seed otherwise
    model = r.architecture()
    info = _load_checkpoint(name, model)
    if info is None:
        deps = {d: build(d)[0] for d in r.depends}
        with _build_lock(name):  # two workers of a run: one trains, the other waits and loads its checkpoint
            info = _load_checkpoint(name, model)
            if info is None:
                info = _train(name, r, model, deps)
    return model.eval(), info


@contextmanager
def _build_lock(name: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``NAME.lock`` beside the checkpoint, for the time of a build."""
    path = checkpoint_path(name).with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "w")  # noqa: SIM115 - closed by the with below
    except OSError as exc:  # a read-only or full cache: the build could not keep its checkpoint
        raise UserError(
            f"cannot build zoo model {name!r}: the cache {path.parent} is not writable ({exc.strerror}); set "
            "FAITHBENCH_CACHE to a writable folder (the checkpoints already there are read from anywhere)"
        ) from None
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _train(name: str, r: Recipe, model: nn.Module, deps: dict[str, nn.Module]) -> dict:
    """Train ``model`` by its recipe on the CPU, save the checkpoint; returns its info."""
    _say(f"building {name}: {r.description}")
    start = time.perf_counter()
    # text builds keep a snapshot at each epoch's end beside the checkpoint: a build cut short resumes from it (and
    # its build_seconds are then those of the last process); it goes once the checkpoint is saved
    with training_snapshot(checkpoint_path(name).with_suffix(".partial")):
        with build_numerics() as numerics:
            extra = r.train(model, deps, r.params)
        extra["build_numerics"] = numerics
        extra["build_seconds"] = round(time.perf_counter() - start, 1)  # training only, dependencies excluded
        model.eval()
        info = {**held_out_accuracy(r, model), "recipe_hash": recipe_hash(name), **extra}
        _say(f"{name}: held-out accuracy {info['test_accuracy']:.4f}")
        _save_checkpoint(name, model, info)
    return info


def missing(names: Iterable[str]) -> list[str]:
    """The zoo models among ``names`` without a checkpoint, with the zoo models their builds need, dependencies
    first (names outside the zoo are ignored; a model whose checkpoint exists needs none of its dependencies)."""
    seen: set[str] = set()
    todo: list[str] = []

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        if checkpoint_path(name).exists():
            return
        for dep in RECIPES.get(name).depends:
            visit(dep)
        todo.append(name)

    for name in names:
        if name in RECIPES:
            visit(name)
    return todo


def build_missing(names: Iterable[str]) -> list[str]:
    """Build, one after the other, the zoo models :func:`missing` lists, each under a training bar (or plain lines)
    named ``zoo build i/n NAME``; returns their names. A run calls it before its first unit, so that build time
    has its own progress and never enters the units' pace."""
    todo = missing(names)
    if not todo:
        return []
    _say(f"{len(todo)} model(s) to build first (trained here, minutes each on a CPU): {', '.join(todo)}")
    start = time.perf_counter()
    for i, name in enumerate(todo, 1):
        with build_label(f"zoo build {i}/{len(todo)} {name}"):
            build(name)
        if not silenced():  # a progress line: --no-progress drops it
            _say(f"{i}/{len(todo)} built, {clock_text(time.perf_counter() - start)} elapsed")
    return todo
