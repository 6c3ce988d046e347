"""The command line's catalog (:mod:`faithbench.bench.cli.catalog`) from the live registries.

``python -m faithbench.bench.cli.make_catalog`` rewrites ``catalog.json`` (and the installed registries' record and
``docs/reference.md``) after a metric, model, method, data set, suite or setting is added or changed; a test fails
with that command when the files and the registries differ. Only this module imports the registries (and with them
torch): ``--help`` and ``list`` read the file.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from faithbench.attributions import METHODS, RUN_CONTROLS
from faithbench.bench.cli.catalog import CATALOG_FILE, REGENERATE, Table
from faithbench.bench.cli.listing import as_markdown
from faithbench.bench.report.gate import ABS_TOLERANCE, ACCURACY_DROP, REL_TOLERANCE
from faithbench.bench.run.provenance import registry_catalog
from faithbench.bench.run.suite import LISTS, SCALARS, Suite
from faithbench.bench.run.suite_files import SUITES, suite_description
from faithbench.bench.store import run_catalog
from faithbench.config import defaults
from faithbench.io import atomic_write_text
from faithbench.metrics.registry import METRICS
from faithbench.models import MODELS
from faithbench.models.data.datasets import DATASETS

OPTION_TYPES = (int, float, str)  # what argparse can parse from one word (bool would read "False" as true)

INSTALLED_CATALOG = Path(run_catalog.__file__).with_name(run_catalog.INSTALLED_FILE)
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"  # a checkout's (bench/cli/ -> the root)


def _method_flags(caps) -> str:
    flags = (
        ("needs conv layer", caps.needs_layer),
        ("B-cos models only", caps.needs_native),
        ("seeded", caps.seeded),
        ("class-agnostic", not caps.class_specific),
    )
    return ", ".join(f for f, on in flags if on)


def tables() -> list[Table]:
    """Every registered metric (and the conventions its presets name), model, method, data set and suite."""
    modalities = list(dict.fromkeys(d.modality for _, d in DATASETS.items()))
    metrics, conventions = [], {}
    for name, spec in METRICS.items():
        blocked = [why for m in modalities if (why := spec.availability(m))]
        runs = "/".join(spec.modalities) if len(blocked) < len(modalities) else blocked[0]
        note = f" (not runnable: {spec.unavailable})" if spec.evaluate is None else ""
        direction = "higher is better" if spec.higher_is_better else "lower is better"
        metrics.append([name, direction, runs, spec.description + note])
        if spec.conventions is not None:
            conventions.setdefault(id(spec.conventions), spec.conventions)
    out: list[Table] = [("metrics", ["metric", "direction", "data", "what it measures"], metrics)]
    for registry in conventions.values():
        rows = [[name, conv.description] for name, conv in registry.items()]
        out.append((registry.plural, ["name", "convention"], rows))
    models = [[name, s.family, s.source, s.description] for name, s in MODELS.items()]
    out.append(("models", ["model", "family", "source", "description"], models))
    methods = []
    for name, cls in METHODS.items():
        caps = cls.capabilities
        kinds = "/".join(k for k, ok in (("CNN", caps.cnn), ("ViT", caps.vit), ("text", caps.text)) if ok)
        flags = _method_flags(caps)
        methods.append([name, kinds, cls.description + (f" ({flags})" if flags else "")])
    out.append(("methods", ["method", "models", "description"], methods))
    datasets = [[n, s.modality, s.description] for n, s in DATASETS.items()]
    out.append(("datasets", ["data set", "data", "description"], datasets))
    out.append(("suites", ["suite", "description"], [[n, suite_description(n)] for n in SUITES]))
    out.append(("suite keys", ["key", "type", "default"], _suite_keys()))
    out.append(("settings tables", ["table.key", "default", "used by"], _settings()))
    return out


def _suite_keys() -> list[list[str]]:
    """The top-level keys of a suite file (``models``, ``methods`` and ``metrics`` are required)."""
    fields = {f.name: f for f in dataclasses.fields(Suite)}
    rows = []
    for key, (kind, least) in SCALARS.items():
        default = fields[key].default
        shown = "required" if key == "name" else _toml(default) if default is not None else "none"
        kind_text = kind.__name__ + (f" >= {least}" if least is not None else "")
        rows.append([key, kind_text + (' or "auto"' if default == "auto" else ""), shown])
    kinds = {"controls": "true, false or a list of names", "rerun_seeds": "list of integers >= 0"}
    shown = {"controls": "true (every control)"}
    for key in LISTS:
        default = "required" if key in ("models", "methods", "metrics") else shown.get(key, "[]")
        rows.append([key, kinds.get(key, "list of names"), default])
    rows.append(["method_params.NAME", "table", "the method's defaults"])
    return rows


def _toml(value: object) -> str:
    """A default as a suite file spells it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return "none" if value is None else str(value)


def _settings() -> list[list[str]]:
    """Every key of every metric settings table (a metric spec's ``table``) with its default."""
    users: dict[str, list[str]] = {}
    configs = {}
    for name, spec in METRICS.items():
        if spec.table:
            users.setdefault(spec.table, []).append(name)
            configs[spec.table] = spec.config
    return [
        [f"{table}.{key}", _toml(value), ", ".join(users[table])]
        for table, config in configs.items()
        for key, value in defaults(config).items()
    ]


def options() -> list[dict[str, Any]]:
    """Every metric config key that declares a command-line shorthand (its config's ``cli``), with its type and,
    when the default names one of the metric's conventions (a preset), those conventions as its choices."""
    out, seen, flags = [], set(), {}
    for _, spec in METRICS.items():
        if not spec.table or spec.table in seen:
            continue
        seen.add(spec.table)
        known = defaults(spec.config)
        for key, text in getattr(spec.config, "cli", {}).items():
            default = known[key]
            if type(default) not in OPTION_TYPES:
                raise TypeError(f"[{spec.table}] {key}: a command-line option needs an int, float or str default")
            if key in flags:
                raise ValueError(f"[{spec.table}] {key} and [{flags[key]}] {key} would share the option --{key}")
            flags[key] = spec.table
            names = list(spec.conventions) if spec.conventions is not None else []
            choices = names if default in names else []
            row = {"table": spec.table, "key": key, "help": text, "type": type(default).__name__, "default": default}
            out.append({**row, "choices": choices})
    return out


def float_floors() -> dict[str, float]:
    """The metrics whose means float rounding alone moves (``MetricSpec.float_floor`` > 0), for ``compare``."""
    return {name: spec.float_floor for name, spec in METRICS.items() if spec.float_floor > 0}


def scales() -> dict[str, float]:
    """The metrics reported on another scale than [0, 1] (``MetricSpec.scale`` != 1): ``compare``'s default
    absolute tolerance is a fraction of it."""
    return {name: spec.scale for name, spec in METRICS.items() if spec.scale != 1}


def gate_defaults() -> dict[str, float]:
    """``compare``'s default allowances (:func:`faithbench.bench.report.gate.allowances`), for its ``--help``."""
    return {"abs_of_scale": ABS_TOLERANCE, "relative": REL_TOLERANCE, "accuracy_drop": ACCURACY_DROP}


def render() -> str:
    """The catalog file's text: JSON with one option or table row a line (a new model is a one-line diff)."""

    def block(items: list[str], indent: str) -> str:
        return ",\n".join(indent + item for item in items)

    def dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    sections = []
    for title, columns, rows in tables():
        head = f'{{"title": {dumps(title)}, "columns": {dumps(columns)}, "rows": [\n'
        sections.append(head + block([dumps(r) for r in rows], "   ") + "\n  ]}")
    return (
        f'{{\n "generated_by": {dumps(REGENERATE)},\n "float_floors": {dumps(float_floors())},\n'
        f' "scales": {dumps(scales())},\n "gate_defaults": {dumps(gate_defaults())},\n'
        f' "controls": {dumps(list(RUN_CONTROLS))},\n'
        f' "options": [\n{block([dumps(o) for o in options()], "  ")}\n ],\n'
        f' "tables": [\n{block(sections, "  ")}\n ]\n}}\n'
    )


def render_installed() -> str:
    """The installed registries' names and orders that a report reads for a run which recorded none."""
    return json.dumps(registry_catalog().to_dict(), indent=1, ensure_ascii=False) + "\n"


def write(
    path: Path = CATALOG_FILE, installed: Path = INSTALLED_CATALOG, reference: Path = REFERENCE
) -> tuple[Path, ...]:
    """The catalog, the installed registries' record and, in a checkout (where ``docs/`` is), the documentation's
    reference page (``bench list --markdown``): every file a new metric, model or method regenerates."""
    atomic_write_text(path, render())
    atomic_write_text(installed, render_installed())
    if not reference.parent.is_dir():
        return path, installed
    atomic_write_text(reference, as_markdown(tables()))
    return path, installed, reference


if __name__ == "__main__":
    sys.stdout.write("".join(f"wrote {p}\n" for p in write()))
