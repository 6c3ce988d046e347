"""The metric registry: every metric the runner can evaluate, in leaderboard order.

Adding a metric: a module in this package with its function(s), config and a module-level ``MetricSpec`` (see
:mod:`faithbench.metrics.spec`; ``described(name, ...)`` joins its table in ``specs.toml``, whose order is the
leaderboard's). The registry finds it: no list here. From outside the package (a suite's ``plugins`` module),
:func:`register_metric`.
"""

from __future__ import annotations

import importlib
import pkgutil

from faithbench import metrics as _package
from faithbench.metrics.spec import MetricSpec
from faithbench.metrics.spec_table import spec_table
from faithbench.registry import Registry

METRICS: Registry[MetricSpec] = Registry("metric")


def register_metric(spec: MetricSpec) -> MetricSpec:
    return METRICS.register(spec.name, spec)


def package_specs() -> list[MetricSpec]:
    """Every ``MetricSpec`` a module of this package defines at its top level, in ``specs.toml``'s order (a spec
    the table lacks: after those, by module name); a table no module describes is an error."""
    found: dict[str, MetricSpec] = {}
    for info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda m: m.name):
        if info.name in ("registry", "__main__"):
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, MetricSpec):
                found.setdefault(value.name, value)
    order = list(spec_table())
    missing = [name for name in order if name not in found]
    if missing:
        raise RuntimeError(f"specs.toml describes {missing}, which no module of faithbench.metrics defines")
    return sorted(found.values(), key=lambda s: (order.index(s.name) if s.name in order else len(order), s.name))


for _spec in package_specs():
    register_metric(_spec)
