"""What ``--help`` and ``list`` show, read from ``catalog.json`` beside this module instead of the registries.

Importing the registries means importing torch and every model (seconds); the command line should answer at once.
The file is generated from the live registries by :mod:`faithbench.bench.cli.make_catalog` (``python -m
faithbench.bench.cli.make_catalog`` rewrites it; a test fails with that command when it is stale). This module
imports nothing heavy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CATALOG_FILE = Path(__file__).with_name("catalog.json")
REGENERATE = "python -m faithbench.bench.cli.make_catalog"

Table = tuple[str, list[str], list[list[str]]]  # title, column names, rows (all text)


@dataclass(frozen=True)
class ConfigOption:
    """A metric setting that `run` offers as an option: ``--KEY`` sets ``KEY`` of the suite's ``[TABLE]``."""

    table: str
    key: str
    help: str
    type: str  # int, float or str: the type of the default
    default: Any
    choices: tuple[str, ...] = ()  # the fixed set of names the value may take (none: any value of its type)

    @property
    def flag(self) -> str:
        return f"--{self.key.replace('_', '-')}"

    @property
    def dest(self) -> str:
        return f"cfg_{self.table}_{self.key}"


@cache
def _load() -> dict[str, Any]:
    return json.loads(CATALOG_FILE.read_text(encoding="utf-8"))


def config_options() -> list[ConfigOption]:
    """The metric settings with a command-line option, in registry order."""
    return [ConfigOption(**{**o, "choices": tuple(o["choices"])}) for o in _load()["options"]]


def run_controls() -> list[str]:
    """The control explainers a suite's ``controls = true`` runs (``attributions.RUN_CONTROLS``)."""
    return list(_load()["controls"])


def float_floors() -> dict[str, float]:
    """Metric name -> the change of its mean that float rounding alone makes (``MetricSpec.float_floor``; absent: 0)."""
    return dict(_load()["float_floors"])


def tables() -> list[Table]:
    """The tables of ``list``: every registered metric, convention, model, method, data set, suite and setting."""
    return [(t["title"], t["columns"], t["rows"]) for t in _load()["tables"]]


def scales() -> dict[str, float]:
    """Metric name -> its reported scale (``MetricSpec.scale``; absent: 1)."""
    return dict(_load()["scales"])


def gate_defaults() -> dict[str, float]:
    """``compare``'s default allowances: ``abs_of_scale``, ``relative``, ``accuracy_drop``."""
    return dict(_load()["gate_defaults"])
