"""The metrics' declarative table (metrics/specs.toml): one table per registered metric, in leaderboard order, giving
only descriptive fields; a metric module joins it with its code through ``described``."""

from __future__ import annotations

import doctest
import sys

import pytest

from faithbench.metrics import spec_table
from faithbench.metrics.complexity import cost
from faithbench.metrics.registry import METRICS, package_specs
from faithbench.metrics.spec_table import DESCRIPTIVE, described


def test_every_table_is_a_registered_metric_in_leaderboard_order():
    table = list(spec_table.spec_table())
    assert table == [name for name in METRICS if name in table]
    assert [spec.name for spec in package_specs()] == table  # every module's metric has a table, and no other


def test_a_new_metric_module_is_registered_without_a_list(tmp_path, monkeypatch):
    """A module of the package that defines a ``MetricSpec`` is found (after the table's, by name, where the table
    lacks it): adding a metric edits no registry list."""
    import faithbench.metrics as package

    (tmp_path / "zz_new_metric.py").write_text(
        "from faithbench.metrics.spec import MetricSpec\n"
        "SPEC = MetricSpec(name='zz_new', description='new', higher_is_better=True, evaluate=None)\n"
    )
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    try:
        names = [spec.name for spec in package_specs()]
    finally:
        sys.modules.pop("faithbench.metrics.zz_new_metric", None)
    assert names == [*spec_table.spec_table(), "zz_new"]


def test_the_registered_spec_carries_the_table_fields():
    for name, row in spec_table.spec_table().items():
        spec = METRICS.get(name)
        assert {key: getattr(spec, key) for key in row} == row
        assert spec.evaluate is not None and spec.cost is not None  # the code came from the module


def test_the_example_runs():
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder(recurse=False).find(described, "described", globs={}):
        runner.run(test)
    assert runner.summarize(verbose=False).attempted >= 2 and runner.summarize(verbose=False).failed == 0


def test_a_field_given_twice_or_a_name_without_a_table_is_refused():
    with pytest.raises(TypeError, match=r"\['unit'\] are given by specs.toml"):
        described("entropy", evaluate=lambda unit, cfg: None, cost=cost, unit="bits")
    with pytest.raises(KeyError, match="'entropi' has no table in specs.toml"):
        described("entropi", evaluate=lambda unit, cfg: None)


def test_code_in_the_table_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "specs.toml"
    bad.write_text('[entropy]\ndescription = "x"\nhigher_is_better = false\nevaluate = "explanation_entropy"\n')
    monkeypatch.setattr(spec_table, "TABLE", bad)
    spec_table.spec_table.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"\['evaluate'\] are code, given by the metric's module"):
            spec_table.spec_table()
    finally:
        monkeypatch.undo()
        spec_table.spec_table.cache_clear()
    assert set(DESCRIPTIVE) >= set(spec_table.spec_table()["entropy"])
