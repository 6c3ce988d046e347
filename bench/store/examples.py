"""The example maps of a run: one explanation per (model, method) unit, computed by the runner while the model is
loaded and saved in ``examples/`` beside the results, keyed by the unit it illustrates; the report draws them
(:mod:`faithbench.bench.report.panel`) without loading a model.

The first metric of the suite that offers an ``example`` hook decides what is shown (e.g. one grid, the same for
every model). Controls ignore the model and reruns repeat a method: neither gets an example.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from faithbench.io import atomic_torch_save

if TYPE_CHECKING:  # the store imports no layer below bench at run time (a report loads no registry)
    from faithbench.metrics.types import Example

FOLDER = "examples"


def path_of(run_dir: Path, model: str, method: str) -> Path:
    return Path(run_dir) / FOLDER / f"{model}__{method}.pt"


def _example_of(run_dir: Path, model: str, method: str, key: str) -> dict | None:
    """The saved example of this very unit (same key), or None (none saved, or a stale one of an earlier run)."""
    path = path_of(run_dir, model, method)
    example = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    return example if example is not None and example.get("key") == key else None


def has_example(run_dir: Path, model: str, method: str, key: str) -> bool:
    return _example_of(run_dir, model, method, key) is not None


def save_example(run_dir: Path, model: str, method: str, key: str, shown: Example) -> None:
    """Save the example a metric chose and the unit's method explained (:meth:`MetricSpec.example`) under the unit's
    key."""
    example = {
        "key": key,
        "image": shown.image,
        "map": shown.attribution,
        "label": shown.label,
        "caption": shown.caption,
    }
    atomic_torch_save(path_of(run_dir, model, method), example)


def read_examples(run_dir: Path, keys: dict[tuple[str, str], str]) -> dict[tuple[str, str], dict]:
    """(model, method) -> {"image", "map", "label", "caption"} of every unit in ``keys`` whose saved example is of
    that unit (a stale file of an earlier run in the same folder is left out)."""
    found = {pair: _example_of(run_dir, *pair, key) for pair, key in sorted(keys.items())}
    return {pair: example for pair, example in found.items() if example is not None}
