"""``rescore --sweep``: a finished run's stored maps scored under each declared scoring-only alternative.

Each metric config declares, as data, the settings that change only how stored maps are scored and their
alternatives (``protocols``, a class attribute: e.g. ``{"baseline": ("mean", "blur", "value")}``). A protocol
is the run's settings with one such key of one table set to one other alternative (one at a time, not their
product), re-scored by :func:`~faithbench.bench.run.rescoring.rescore` into ``RUN/rescored/<TABLE.KEY=VALUE>``.
The comparison of the rankings (``protocols.csv``) is the report's: :mod:`faithbench.bench.report.protocols`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithbench.bench.run.rescoring import folder_name, rescore
from faithbench.bench.run.suite import Suite, recorded_suite
from faithbench.bench.store.results import RunStore
from faithbench.errors import UserError
from faithbench.io import writable_folder


@dataclass(frozen=True)
class Protocol:
    """One scoring-only alternative: ``settings`` ({table: {key: value}}), the metrics it scores again and the
    folder its results go to (``RUN/rescored/<name>``)."""

    name: str
    table: str
    key: str
    value: Any
    metrics: tuple[str, ...]
    folder: Path

    @property
    def settings(self) -> dict[str, dict[str, Any]]:
        return {self.table: {self.key: self.value}}


def sweep_keys(suite: Suite) -> dict[str, tuple[Any, ...]]:
    """``TABLE.KEY`` -> alternatives, for every scoring-only key the suite's metric tables declare."""
    tables = dict.fromkeys(suite.metric_tables[m] for m in suite.metrics if suite.metric_tables[m])
    return {
        f"{table}.{key}": tuple(values)
        for table in tables
        for key, values in getattr(type(suite.configs[table]), "protocols", {}).items()
    }


def plan_protocols(suite: Suite, run_dir: Path, keys: Sequence[str] = ()) -> list[Protocol]:
    """The protocols of ``suite`` (the run's suite): each declared key of each of its tables (only ``keys``,
    ``TABLE.KEY``, when given) set to each alternative other than the run's own value."""
    declared = sweep_keys(suite)
    unknown = sorted(set(keys) - set(declared))
    if unknown:
        raise UserError(
            f"--sweep-key {', '.join(unknown)}: not a scoring-only setting of this run's metric tables; "
            f"these are: {', '.join(declared) or '(none)'}"
        )
    plans = []
    for name, alternatives in declared.items():
        if keys and name not in keys:
            continue
        table, key = name.split(".")
        metrics = tuple(m for m in suite.metrics if suite.metric_tables[m] == table)
        for value in alternatives:
            if value != getattr(suite.configs[table], key):
                settings = {table: {key: value}}
                folder = run_dir / "rescored" / folder_name(settings)
                plans.append(Protocol(folder_name(settings), table, key, value, metrics, folder))
    return plans


def run_protocols(run_dir: Path, keys: Sequence[str] = ()) -> list[Protocol]:
    """The protocols :func:`sweep` would score for the run in ``run_dir`` (nothing is scored)."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        raise UserError(f"{run_dir} is not a finished run folder (no run.json)")
    record = RunStore(run_dir).read_record()
    return plan_protocols(recorded_suite(record, run_dir / "run.json"), run_dir, keys)


def sweep(
    run_dir: Path, keys: Sequence[str] = (), device: str = "auto", on_protocol: Any = None
) -> list[tuple[Protocol, list[str]]]:
    """Re-score the run in ``run_dir`` under each of its protocols; returns each protocol with the notes of what it
    left out. ``on_protocol(i, n, protocol)`` is called before each (progress)."""
    plans = run_protocols(run_dir, keys)
    if not plans:
        raise UserError(f"{run_dir}: no scoring-only setting to sweep (none of its metric tables declares one)")
    fix = "--sweep writes beside the run: copy the run to a writable disk"
    writable_folder(Path(run_dir) / "rescored", "the sweep", fix)
    done = []
    for i, protocol in enumerate(plans):
        if on_protocol is not None:
            on_protocol(i, len(plans), protocol)
        results, _, notes = rescore(run_dir, protocol.settings, protocol.folder, device)
        if results.empty:  # the run kept no maps to replay: every protocol would say the same
            raise UserError(f"{run_dir}: nothing could be re-scored under {protocol.name}:\n" + "\n".join(notes))
        done.append((protocol, notes))
    return done
