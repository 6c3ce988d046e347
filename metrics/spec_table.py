"""The metrics' declarative table: what each registered metric is, as data (``metrics/specs.toml``).

A :class:`~faithbench.metrics.spec.MetricSpec` has two halves. What a metric *is* (its description, direction, unit,
scale, config table, plot and axis labels, whether it reads only the maps, knows the ground truth, or has a float
floor) is one table of ``specs.toml`` per metric, in leaderboard order, so that every metric's description can be
read, compared and reviewed in one place. What a metric *does* (its evaluation and cost hooks, its config class, its
example, applicability, pairing and conventions) stays in the metric's module, which joins the two with
:func:`described`. A metric registered from outside the package (a suite's ``plugins``) builds its ``MetricSpec``
directly, with every field as a keyword.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

from faithbench.metrics.spec import MetricSpec

TABLE = Path(__file__).with_name("specs.toml")
# The fields the table may give; every other field is code and comes from the module.
DESCRIPTIVE = (
    "description",
    "higher_is_better",
    "modalities",
    "scale",
    "unit",
    "table",
    "plot",
    "curve_label",
    "curve_value_label",
    "unavailable",
    "ground_truth",
    "given_maps",
    "float_floor",
)


@cache
def spec_table() -> dict[str, dict[str, Any]]:
    """``specs.toml`` as {metric name: its descriptive fields}, in the file's (leaderboard) order."""
    with TABLE.open("rb") as f:
        table = tomllib.load(f)
    known = {f.name for f in fields(MetricSpec)}
    for name, row in table.items():
        wrong = sorted(set(row) - set(DESCRIPTIVE))
        if wrong:
            kind = "code, given by the metric's module" if set(wrong) <= known else "not MetricSpec fields"
            raise ValueError(f"{TABLE.name} [{name}]: {wrong} are {kind}; the table gives only {list(DESCRIPTIVE)}")
        if "modalities" in row:
            row["modalities"] = tuple(row["modalities"])
    return table


def described(name: str, **code: Any) -> MetricSpec:
    """The metric ``name``: its descriptive fields from ``specs.toml``, its code (``evaluate``, ``cost``, ``config``,
    ``example``, ``applies``, ``pairing``, ``eligibility``, ``conventions``) from ``code``.

    >>> from faithbench.metrics.complexity import cost, explanation_entropy
    >>> from faithbench.metrics.spec_table import described
    >>> spec = described("entropy", evaluate=explanation_entropy, cost=cost)
    >>> spec.unit, spec.higher_is_better, spec.modalities
    ('nats', False, ('image', 'text'))
    """
    row = spec_table().get(name)
    if row is None:
        raise KeyError(f"metric {name!r} has no table in {TABLE.name}; it has {list(spec_table())}")
    both = sorted(set(row) & set(code))
    if both:
        raise TypeError(f"{name}: {both} are given by {TABLE.name}; the module names only code")
    return MetricSpec(name=name, **row, **code)
