"""One order of the metrics, and one order and one colour per method, for every table and figure of a report:
methods in the registry's order (controls last, in grey), models in the run's order; a method keeps its colour in
every figure and every run. The orders are those the run recorded (:mod:`faithbench.bench.store.run_catalog`)."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from faithbench.bench.store.run_catalog import current

# Twenty colours a reader can tell apart (matplotlib's tab20, the dark shade of each hue first); controls are grey.
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5",
    "#393b79", "#637939",
)  # fmt: skip
CONTROL_GREY = "#7f7f7f"


def is_control(method: str) -> bool:
    return method in current().controls


def method_order(methods: Iterable[str]) -> list[str]:
    """The given methods in the registry's order (unregistered ones after, by name), the controls last (first runs
    only: a report orders and colours methods, the reruns of seeded ones feed its statistics)."""
    names, catalog = list(dict.fromkeys(methods)), current()
    registered = {name: i for i, name in enumerate(catalog.methods)}
    controls = {name: i for i, name in enumerate(catalog.controls)}

    def key(m: str) -> tuple:
        if m in controls:
            return (2, controls[m], m)
        return (0, registered[m], m) if m in registered else (1, 0, m)

    return sorted(names, key=key)


def method_colour(method: str) -> str:
    """The method's colour: fixed by its place in the registry, so it is the same in every figure and run."""
    if is_control(method):
        return CONTROL_GREY
    names = current().methods
    index = names.index(method) if method in names else len(names) + sum(map(ord, method))
    return _PALETTE[index % len(_PALETTE)]


def model_order(results: pd.DataFrame) -> list[str]:
    """The models in the order the run lists them (the suite's order)."""
    return list(dict.fromkeys(results["model"]))


def metric_order(metrics: Iterable[str]) -> list[str]:
    """The given metrics in the registry's (the leaderboard's) order, unregistered ones after, by name."""
    names, registered = set(metrics), current().metrics
    return [m for m in registered if m in names] + sorted(names - set(registered))
