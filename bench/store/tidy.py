"""A run's tidy CSVs (results.csv, samples.csv, curves.csv) built from its finished units.

The runner rewrites the three files while it runs (at most every 20 s, :mod:`faithbench.bench.run.runner`), so that
they always show every finished unit. Rebuilding them from scratch each time made that cost grow with the run: on the
vision suite the rewrites took 97 s of a 12-minute run, mostly formatting curves.csv (39 MB at the end) again and
again. A finished unit does not change, so :class:`Tables` keeps each unit's rows, and their CSV text, from the first
write on: a rewrite formats only the units that finished since. The files are the same bytes as one ``pd.concat`` of
every unit's rows written with ``to_csv`` (a unit's rows are formatted with the columns' dtypes of the whole table,
which a new unit can change: then every unit is formatted again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from faithbench.bench.store.export import write_run_document
from faithbench.bench.store.intervals import summarise
from faithbench.io import atomic_write_text

# What a row records of its job besides the method's name (:class:`~faithbench.bench.run.plan.Job`).
JOB_COLUMNS = ("rerun_of", "rerun_seed", "is_control")
RESULT_COLUMNS = [
    "suite",
    "model",
    "family",
    "method",
    *JOB_COLUMNS,
    "metric",
    "aggregate",
    "mean",
    "std",
    "n",
    "n_clusters",
    "ci_low",
    "ci_high",
    "n_undefined",
    "n_dropped",
    "unit",
    "higher_is_better",
    "explain_time_s",
    "metric_time_s",
    "model_calls",
    "model_inputs",
    "peak_memory_mb",
]

# The control explainers when rows carried no ``is_control`` column yet: frozen, since every row written since
# carries the column (a control added later never meets this table; a test keeps them a subset of CONTROLS).
LEGACY_CONTROLS = ("random", "uniform", "centre", "edges", "oracle")


def job_columns(unit: dict) -> dict:
    """A unit's ``rerun_of``, ``rerun_seed`` and ``is_control`` (:class:`~faithbench.bench.run.plan.Job`)."""
    if "is_control" in unit:
        return {c: unit[c] for c in JOB_COLUMNS}
    return legacy_job_columns(unit["method"])


def legacy_job_columns(name: str) -> dict:
    """What a row written before those fields existed says in its method name: a rerun ``METHOD@seedN``, a
    control by its name. The one place that reads a method name for anything but its name."""
    base, _, seed = str(name).partition("@seed")
    return {
        "rerun_of": base if seed else None,
        "rerun_seed": int(seed) if seed else None,
        "is_control": base in LEGACY_CONTROLS,
    }


@dataclass
class UnitRows:
    """One finished unit's rows: its results rows, its samples and curves frames, and their CSV text by dtypes."""

    results: list[dict]
    samples: list[pd.DataFrame]
    curves: list[pd.DataFrame]
    text: dict[str, tuple[tuple, str]] = field(default_factory=dict)  # kind -> (the dtypes it was written in, CSV)
    empty: dict[str, pd.DataFrame] = field(default_factory=dict)

    def columns(self, kind: str) -> pd.DataFrame | None:
        """No rows, the columns and dtypes of this unit's ``kind`` frames together (None: it has none)."""
        if kind not in self.empty:
            frames = getattr(self, kind)
            self.empty[kind] = pd.concat([f.iloc[:0] for f in frames]) if frames else None
        return self.empty[kind]

    def csv(self, kind: str, dtypes: pd.Series) -> str:
        """The rows of ``kind`` (samples or curves) as CSV lines without a header, in the whole table's dtypes."""
        signature = tuple(dtypes.items())
        if self.text.get(kind, ((),))[0] != signature:
            frames = [f for f in getattr(self, kind) if len(f)]
            rows = pd.concat(frames).astype(dtypes) if frames else None  # one to_csv per unit: it costs ~3 ms a call
            self.text[kind] = (signature, "" if rows is None else rows.to_csv(index=False, header=False))
        return self.text[kind][1]


def unit_rows(unit: dict, suite: str) -> UnitRows:
    """The rows of one finished unit: a results row, per-sample scores and curves for each of its metrics."""
    ident = {"model": unit["model"], "method": unit["method"], **job_columns(unit)}
    out = UnitRows([], [], [])
    for metric, rec in unit["metrics"].items():
        values = np.asarray(rec["values"], dtype=float)
        undefined = np.asarray(rec["undefined"], dtype=bool)
        size = int(rec["params"].get("cluster_size", 1))  # e.g. the cells of one grid
        ids = np.asarray(rec["sample_ids"], dtype=np.int64)  # integers in every file, an empty unit's too
        clusters = ids // size
        out.results.append(
            {
                "suite": suite,
                **ident,
                "family": unit["family"],
                "metric": metric,
                "aggregate": "mean",
                **summarise(values, clusters if size > 1 else None),
                "n_undefined": int(undefined.sum()),
                "n_dropped": int((~np.isfinite(values)).sum()),
                "unit": rec["unit"],
                "higher_is_better": rec["higher_is_better"],
                "explain_time_s": rec["explain_time_s"],
                "explained": rec.get("explained", ""),
                "metric_time_s": rec["metric_time_s"],
                **{key: rec.get(key, float("nan")) for key in ("model_calls", "model_inputs", "peak_memory_mb")},
                **{key: unit.get(key, "") for key in ("dataset", "n_samples", "batch_size", "data_root")},
                "pieces": unit.get("pieces", 1),
                "piece_time_s": unit.get("piece_time_s", float("nan")),  # every metric of the longest piece
                **unit["provenance"],
                "model_weights_sha256": unit.get("weights_sha256", ""),
                "params": json.dumps(
                    {
                        **rec["params"],
                        "method_params": unit["method_params"],
                        "max_batch": unit.get("max_batch"),
                        "cost_params": unit.get("cost_params", []),
                    },  # fmt: skip
                    sort_keys=True,
                ),
            }
        )
        scores = {"sample_id": ids, "cluster_id": clusters, "value": values, "undefined": undefined}
        out.samples.append(pd.DataFrame({**ident, "metric": metric, **scores}))
        if rec.get("curve") is not None:
            fr = np.asarray(rec["fractions"], dtype=float)
            curve = {"sample_id": np.repeat(ids, len(fr)), "fraction": np.tile(fr, len(ids))}
            value = np.asarray(rec["curve"], dtype=float).reshape(-1)
            out.curves.append(pd.DataFrame({**ident, "metric": metric, **curve, "value": value}))
    return out


def _table_csv(parts: list[UnitRows], kind: str) -> str:
    """``pd.concat`` of every unit's ``kind`` frames written with ``to_csv(index=False)``, from the cached lines."""
    empties = [e for e in (p.columns(kind) for p in parts) if e is not None]
    if not empties:
        return pd.DataFrame().to_csv(index=False)
    empty = pd.concat(empties)  # the whole table's columns and dtypes
    return empty.to_csv(index=False) + "".join(p.csv(kind, empty.dtypes) for p in parts)


class Tables:
    """The tables of one run folder, with each finished unit's rows kept from one write to the next (a unit is the
    same dict while it is finished: a recomputed or reloaded unit is another dict, and is formatted anew)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self._rows: dict[tuple[str, str], tuple[dict, str, UnitRows]] = {}

    def _unit_rows(self, unit: dict, suite: str) -> UnitRows:
        pair = (unit["model"], unit["method"])
        kept = self._rows.get(pair)
        if kept is None or kept[0] is not unit or kept[1] != suite:
            kept = self._rows[pair] = (unit, suite, unit_rows(unit, suite))
        return kept[2]

    def write(self, units: Iterable[dict], suite: str) -> pd.DataFrame:
        """Rewrite results.csv, samples.csv, curves.csv and results.json from the finished ``units``; returns the
        results.

        Each row carries the provenance recorded when its unit was computed."""
        parts = [self._unit_rows(u, suite) for u in units]
        frame = pd.DataFrame([row for p in parts for row in p.results])
        if not frame.empty:
            frame = frame[RESULT_COLUMNS + [c for c in frame.columns if c not in RESULT_COLUMNS]]
        atomic_write_text(self.out / "results.csv", frame.to_csv(index=False))
        atomic_write_text(self.out / "samples.csv", _table_csv(parts, "samples"))
        atomic_write_text(self.out / "curves.csv", _table_csv(parts, "curves"))
        write_run_document(self.out, frame)
        return frame
