"""The example maps of a run: one explanation per (model, method) unit, computed by the runner while the model is
loaded and saved in ``examples/`` beside the results, keyed by the unit it illustrates; the report draws them
(:mod:`faithbench.bench.report.panel`) without loading a model.

The first metric of the suite that offers an ``example`` hook decides what is shown (e.g. one grid, the same for
every model). Controls ignore the model and reruns repeat a method: neither gets an example.
"""

from __future__ import annotations

from pathlib import Path

import torch

from faithbench.io import atomic_torch_save
from faithbench.metrics.spec import MetricSpec, Unit

FOLDER = "examples"


def path_of(run_dir: Path, model: str, method: str) -> Path:
    return Path(run_dir) / FOLDER / f"{model}__{method}.pt"


def has_example(run_dir: Path, model: str, method: str, key: str) -> bool:
    """Whether the folder holds the example of this very unit (same key)."""
    path = path_of(run_dir, model, method)
    return path.exists() and read_example(path).get("key") == key


def save_example(
    run_dir: Path, unit: Unit, spec: MetricSpec, config: object, model: str, method: str, key: str
) -> None:
    """Explain the example ``spec`` chooses with ``unit``'s model and method and save it under the unit's key."""
    shown = spec.example(unit, config)
    example = {
        "key": key,
        "image": shown.image,
        "map": shown.attribution,
        "label": shown.label,
        "caption": shown.caption,
    }
    atomic_torch_save(path_of(run_dir, model, method), example)


def read_example(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def read_examples(run_dir: Path, keys: dict[tuple[str, str], str]) -> dict[tuple[str, str], dict]:
    """(model, method) -> {"image", "map", "label", "caption"} of every unit in ``keys`` whose saved example is of
    that unit (a stale file of an earlier run in the same folder is left out)."""
    found = {}
    for (model, method), key in sorted(keys.items()):
        path = path_of(run_dir, model, method)
        if path.exists() and (example := read_example(path)).get("key") == key:
            found[(model, method)] = example
    return found
