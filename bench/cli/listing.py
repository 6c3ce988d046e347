"""``python -m bench list``: the registries, printed as text or (``--markdown``) as the documentation's reference page
(``docs/reference.md`` is this output; a test fails when the two drift apart)."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from faithbench.attributions import METHODS
from faithbench.bench.run.data import DATASETS
from faithbench.bench.run.suite import LISTS, SCALARS, SUITES, Suite, suite_description
from faithbench.config import defaults
from faithbench.metrics.registry import METRICS
from faithbench.models import MODELS

Table = tuple[str, list[str], list[list[str]]]  # title, column names, rows


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
        rows.append([key, kind.__name__ + (f" >= {least}" if least is not None else ""), shown])
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


def as_text(sections: list[Table]) -> str:
    """One block per table: its title, then a line per row with the columns aligned (the last one free)."""
    lines = []
    for title, columns, rows in sections:
        widths = [max(len(r[i]) for r in rows) for i in range(len(columns) - 1)] if rows else []
        lines += ["", f"{title}:"]
        lines += ["  " + "".join(c.ljust(w + 1) for c, w in zip(r[:-1], widths, strict=True)) + r[-1] for r in rows]
    return "\n".join(lines[1:]) + "\n"


def as_markdown(sections: list[Table]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "# Reference",
        "",
        "Every registered metric, convention, model, attribution method, data set and suite, and every key of a suite",
        "file and of its settings tables with its default, as `python -m bench list --markdown` prints them (this page",
        "is that output; a test fails when they drift apart).",
    ]
    for title, columns, rows in sections:
        lines += ["", f"## {title[0].upper()}{title[1:]}", "", "| " + " | ".join(columns) + " |"]
        lines += ["| " + " | ".join("---" for _ in columns) + " |"]
        lines += ["| " + " | ".join([f"`{r[0]}`", *map(cell, r[1:])]) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def cmd_list(args: argparse.Namespace) -> int:
    """``python -m bench list [--markdown]``."""
    sections = tables()
    sys.stdout.write(as_markdown(sections) if getattr(args, "markdown", False) else as_text(sections))
    return 0
