"""Typed configuration tables: a frozen dataclass per table, built from TOML with every key checked.

A config class lists its parameters and their defaults once; :func:`from_table` rejects unknown
keys and values of the wrong type with one line that names the table, the key and the valid keys.
Classes validate their values' ranges in ``__post_init__`` (raising ``ValueError``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from faithbench.errors import UserError

C = TypeVar("C")


def check_type(value: Any, default: Any, where: str) -> Any:
    """Coerce / check ``value`` against the type of the field's default (TOML gives lists, ints, floats)."""
    if default is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        if hasattr(value, "dtype"):  # a tensor or array given through the Python API
            return value
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, tuple):
        ok = isinstance(value, list | tuple)
        value = tuple(value) if ok else value
    else:
        ok = True
    if not ok:
        raise UserError(f"{where} must be {type(default).__name__} (like the default {default!r}), got {value!r}")
    return value


def defaults(cls: type[C]) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def from_table(cls: type[C], table: Mapping[str, Any] | None, where: str) -> C:
    """``cls(**table)`` with unknown keys, wrong types and bad values reported as one :class:`UserError`."""
    if table is not None and not isinstance(table, Mapping):
        raise UserError(f"{where} must be a table of settings, got {table!r}")
    table = dict(table or {})
    known = defaults(cls)
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UserError(f"{where} has unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(known) or '(none)'}")
    values = {k: check_type(v, known[k], f"{where} {k}") for k, v in table.items()}
    try:
        return cls(**values)
    except (ValueError, TypeError) as exc:  # a value out of range (the class's own check)
        raise UserError(f"{where}: {exc}") from None


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain data (tuples as lists), for run.json and the resume key."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def env_seconds(name: str, default: float, *, zero_ok: bool = False) -> float:
    """Seconds from environment variable ``name`` (``default`` when unset); anything but a number > 0 (>= 0 with
    ``zero_ok``) is a one-line error naming the variable."""
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero_ok else value > 0):
        raise UserError(f"{name}={raw!r}: expected a number of seconds {'>=' if zero_ok else '>'} 0")
    return value
