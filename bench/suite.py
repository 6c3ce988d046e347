"""Declarative suites: TOML files under ``bench/suites/`` (adding a suite is adding a file)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, replace
from importlib.resources import files
from pathlib import Path
from typing import Any

from faithbench.errors import UserError

IMAGE_METRICS = (
    "gridpg",
    "pixel_deletion",
    "pixel_insertion",
    "comprehensiveness",
    "sufficiency",
    "entropy",
    "entropy_normalised",
    "gini",
)
DATASETS = ("mnist", "imagefolder")
_KEYS = {
    "name",
    "description",
    "dataset",
    "data_root",
    "models",
    "methods",
    "metrics",
    "seed",
    "n_samples",
    "batch_size",
    "gridpg",
    "deletion",
    "erasure",
    "method_params",
}


@dataclass(frozen=True)
class Suite:
    """One benchmark configuration; every field is recorded with the results."""

    name: str
    models: tuple[str, ...]
    methods: tuple[str, ...]
    metrics: tuple[str, ...]
    description: str = ""
    dataset: str = "mnist"
    data_root: str | None = None
    seed: int = 0
    n_samples: int = 64
    batch_size: int = 64
    gridpg: dict[str, Any] = field(default_factory=lambda: {"preset": "bcos-v2", "n_grids": 24})
    deletion: dict[str, Any] = field(default_factory=lambda: {"block_size": 16})
    erasure: dict[str, Any] = field(default_factory=lambda: {"summary": "eraser"})
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def validate(self) -> Suite:
        from attributions import METHODS
        from metrics.gridpg import GRIDPG_PRESETS
        from models import MODELS

        for kind, names, valid in (
            ("model", self.models, MODELS.names()),
            ("method", self.methods, METHODS.names()),
            ("metric", self.metrics, IMAGE_METRICS),
        ):
            unknown = [n for n in names if n not in valid]
            if unknown:
                raise UserError(f"unknown {kind}(s) {', '.join(unknown)}; valid {kind}s: {', '.join(valid)}")
            if not names:
                raise UserError(f"the suite selects no {kind}")
        if self.dataset not in DATASETS:
            raise UserError(f"unknown dataset {self.dataset!r}; valid datasets: {', '.join(DATASETS)}")
        zoo = [m for m in self.models if MODELS.get(m).source == "zoo"]
        if self.dataset != "mnist" and zoo:
            raise UserError(
                f"the zoo models {', '.join(zoo)} classify 28 px MNIST digits; with dataset "
                f"{self.dataset!r} choose pretrained models, e.g. --models resnet18,bcos_resnet18"
            )
        if self.dataset == "mnist" and len(zoo) < len(self.models):
            other = [m for m in self.models if m not in zoo]
            raise UserError(f"models {', '.join(other)} need real data: pass --data-root (an ImageNet-style folder)")
        if self.gridpg.get("preset", "bcos-v2") not in GRIDPG_PRESETS:
            raise UserError(f"unknown GridPG preset {self.gridpg['preset']!r}; valid: {', '.join(GRIDPG_PRESETS)}")
        for key in ("seed", "n_samples", "batch_size"):
            value = getattr(self, key)
            least = 0 if key == "seed" else 1
            if not isinstance(value, int) or value < least:
                raise UserError(f"{key} must be an integer >= {least}, got {value!r}")
        return self

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def available_suites() -> list[str]:
    return sorted(
        p.name.removesuffix(".toml") for p in files("bench").joinpath("suites").iterdir() if p.name.endswith(".toml")
    )


def load_suite(name_or_path: str) -> Suite:
    """A suite by name (``bench/suites/NAME.toml``) or from a TOML file path."""
    path = Path(name_or_path)
    if path.suffix == ".toml":
        if not path.exists():
            raise UserError(f"suite file {path} does not exist")
        text = path.read_text()
    elif name_or_path in available_suites():
        text = files("bench").joinpath("suites", f"{name_or_path}.toml").read_text()
    else:
        raise UserError(
            f"unknown suite {name_or_path!r}; valid suites: {', '.join(available_suites())} (or a path to a .toml file)"
        )
    data = tomllib.loads(text)
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise UserError(
            f"suite {name_or_path!r} has unknown keys {', '.join(unknown)}; valid: {', '.join(sorted(_KEYS))}"
        )
    for key in ("models", "methods", "metrics"):
        data[key] = tuple(data.get(key, ()))
    return Suite(**data).validate()


def with_overrides(suite: Suite, **overrides: Any) -> Suite:
    """The suite with command-line overrides (None = keep); nested tables are merged."""
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in ("gridpg", "deletion", "erasure"):
            changes[key] = {**getattr(suite, key), **value}
        elif key in ("models", "methods", "metrics"):
            changes[key] = tuple(value)
        else:
            changes[key] = value
    return replace(suite, **changes).validate()
