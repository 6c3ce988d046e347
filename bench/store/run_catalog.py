"""What a run records of the registries it ran with (``run.json``'s ``catalog``), so that its report describes the
run as recorded and imports no registry: the contestant methods in the registry's order (their colours and markers
follow it, the same in every figure and run), the control explainers, the metrics in the leaderboard's order with
their curves' axis labels, the ground-truth tier's names and the identities between methods that are mathematics.

A run folder written before the catalog was recorded, and the bare CSVs of the ``compare`` gate, read the catalog of
the installed version instead (``installed_catalog.json`` beside this module, written from the registries by
``python -m faithbench.bench.cli.make_catalog``; a test keeps it current).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

INSTALLED_FILE = "installed_catalog.json"


@dataclass(frozen=True)
class RunCatalog:
    methods: tuple[str, ...]  # the contestant methods, in the registry's order
    controls: tuple[str, ...]  # every control explainer (yardsticks, not contestants), in their order
    corruption_controls: tuple[str, ...]  # the controls that corrupt a method's own map
    truth_corruptions: tuple[str, ...]  # the ground-truth tier's planted corruptions of the exact attribution
    truth_reference: str  # the tier's reference metric (agreement with the exact attribution)
    metrics: tuple[str, ...]  # in the leaderboard's order
    curves: Mapping[str, Mapping[str, str]]  # metric -> its curves' axis labels: {"x": ..., "y": ...}
    identities: tuple[str, ...]  # "a = b: why", one line per known identity

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunCatalog:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


@lru_cache(maxsize=1)
def installed() -> RunCatalog:
    """The catalog of the installed version."""
    return RunCatalog.from_dict(json.loads(files("faithbench.bench.store").joinpath(INSTALLED_FILE).read_text()))


_READING: list[RunCatalog] = []  # a stack (a module global, not a context variable: forked figure workers see it)


def current() -> RunCatalog:
    """The catalog of the run being read (:func:`reading`), else the installed one."""
    return _READING[-1] if _READING else installed()


def recorded(run_dir: Path) -> RunCatalog:
    """The catalog ``run_dir/run.json`` records; the installed one where it records none (or cannot be read)."""
    try:
        record = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return installed()
    raw = record.get("catalog") if isinstance(record, dict) else None
    return RunCatalog.from_dict(raw) if raw else installed()


@contextmanager
def reading(catalog: RunCatalog) -> Iterator[RunCatalog]:
    """Every order, colour and name the report looks up comes from ``catalog`` inside the block."""
    _READING.append(catalog)
    try:
        yield catalog
    finally:
        _READING.pop()
