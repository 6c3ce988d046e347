"""``rescore``: a finished run's stored maps scored again under other metric settings, and the rankings that flip.

``python -m bench rescore RUN --set deletion.baseline=blur --set TABLE.KEY=VALUE`` rebuilds the run's
suite with those table settings, replays every unit's explanations from ``RUN/maps`` (no method runs;
the metrics still call the model, e.g. to score deleted images), writes ``results.csv`` etc. into
``RUN/rescored/<settings>`` and reports, per (model, metric), the method pairs whose order changed. A
metric whose new settings change which inputs are explained (another grid preset, more samples) needs a
new run: it is left out with the reason. With no ``--set`` the run's own scores come back exactly.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from itertools import combinations
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.attributions import get_method
from faithbench.bench.run.data import load_data
from faithbench.bench.run.evaluate import evaluate_unit, suite_unit
from faithbench.bench.run.pairing import load_shared
from faithbench.bench.run.plan import metric_jobs
from faithbench.bench.run.provenance import provenance
from faithbench.bench.run.runner import resolve_device, sample_ids
from faithbench.bench.run.suite import recorded_suite, with_overrides
from faithbench.bench.store.folder_lock import FolderLock
from faithbench.bench.store.results import RunStore, contestants, read_results
from faithbench.calls import call_rows
from faithbench.errors import UserError
from faithbench.io import atomic_write_text, writable_folder
from faithbench.metrics.mapstore import MapStore, MissingMapsError
from faithbench.models import load_model
from faithbench.progress import progress_bar


def parse_settings(pairs: list[str]) -> dict[str, dict[str, Any]]:
    """``table.key=value`` strings -> {table: {key: value}}; values are read as TOML (``1``, ``"blur"``, ``blur``)."""
    tables: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        match = re.fullmatch(r"([A-Za-z_]+)\.([A-Za-z_]+)=(.*)", pair.strip())
        if not match:
            raise UserError(f"--set {pair!r}: expected TABLE.KEY=VALUE, e.g. deletion.baseline=blur")
        table, key, raw = match.groups()
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare word: a string
        tables.setdefault(table, {})[key] = value
    return tables


def folder_name(settings: dict[str, dict[str, Any]]) -> str:
    parts = [f"{t}.{k}={v}" for t, kv in sorted(settings.items()) for k, v in sorted(kv.items())]
    return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts)) or "same-settings"


def ranking_flips(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per (model, metric): the best method before and after and the method pairs whose order reversed (the
    controls are the yardstick, not contestants: left out; so are the reruns of seeded methods)."""
    rows = []
    merged = contestants(before).merge(after, on=["model", "metric", "method"], suffixes=("_before", "_after"))
    for (model, metric), part in merged.groupby(["model", "metric"], sort=False):
        sign = 1.0 if bool(part["higher_is_better_before"].iloc[0]) else -1.0
        a = dict(zip(part["method"], sign * part["mean_before"], strict=True))
        b = dict(zip(part["method"], sign * part["mean_after"], strict=True))
        flips = [f"{x}/{y}" for x, y in combinations(sorted(a), 2) if (a[x] - a[y]) * (b[x] - b[y]) < 0]
        rows.append(
            {
                "model": model,
                "metric": metric,
                "best_before": max(a, key=lambda m: a[m] if a[m] == a[m] else -float("inf")),
                "best_after": max(b, key=lambda m: b[m] if b[m] == b[m] else -float("inf")),
                "n_methods": len(a),
                "n_flipped_pairs": len(flips),
                "flipped_pairs": " ".join(flips),
            }
        )
    return pd.DataFrame(rows)


def rescore(
    run_dir: Path, settings: dict[str, dict[str, Any]], out: Path | None = None, device: str = "auto"
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Re-score ``run_dir`` under ``settings``; returns (results, ranking flips, metrics left out and why)."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        raise UserError(f"{run_dir} is not a finished run folder (no run.json)")
    with FolderLock(run_dir, "bench rescore", reading=True):  # no run may rewrite the folder while it is read
        return _rescore(run_dir, settings, out, device)


def _rescore(
    run_dir: Path, settings: dict[str, dict[str, Any]], out: Path | None, device: str
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    store = RunStore(run_dir)
    record = store.read_record()
    base = recorded_suite(record, run_dir / "run.json")
    suite = with_overrides(base, tables=settings)
    dev = resolve_device(device)
    out = writable_folder(out or run_dir / "rescored" / folder_name(settings), "the re-scored results")
    units = store.run_units(record)  # exactly the run's units: a unit file of another run is never read
    if not units:
        raise UserError(f"{run_dir} has no finished units to re-score")
    data = load_data(suite)
    ids = sample_ids(suite, len(data.labels))
    shared = load_shared(run_dir)  # the items the run's models shared (a grid metric's images): the same items again
    prov = {**provenance(dev, suite.seed), "rescored_from": str(run_dir), "rescore_settings": json.dumps(settings)}
    # Only metrics whose table the settings touch are scored again (with no settings: all of them, the check
    # that replay reproduces the run); the others keep the run's records.
    changed = [m for m in suite.metrics if not settings or suite.metric_tables[m] in settings]
    resolved = {job.name: job for job in metric_jobs(suite)}
    per_metric = {m: (resolved[m],) for m in changed}  # scored one at a time, so that one can fail alone
    done, notes, models = [], [], {}
    for unit in progress_bar(units, desc="rescore", unit="unit", file=sys.stderr):  # plain lines in a log
        method = get_method(unit.get("method_name", unit["method"]), **unit["method_params"])
        states = store.load_maps(unit["model"], unit["method"], unit["key"])
        if not states and not method.capabilities.model_free:
            notes.append(f"{unit['model']} / {unit['method']}: no stored maps (run with store_maps = true)")
            continue
        maps = MapStore()
        for state in states:
            maps.merge(MapStore.from_state(state))
        if unit["model"] not in models:  # one model in memory at a time, its grids shared by its methods
            models = {unit["model"]: (load_model(unit["model"], device=dev), {})}
        model, model_cache = models[unit["model"]]
        rows = unit.get("max_batch") or call_rows(suite.max_batch, dev)  # the run's calls again
        job = suite_unit(suite, model, method, data, ids, dev, rows, model_cache=model_cache, maps=maps, replay=True,
                         shared=shared)  # fmt: skip
        metrics = {m: rec for m, rec in unit["metrics"].items() if m not in per_metric}
        for metric in per_metric:
            try:
                metrics.update(evaluate_unit(job, per_metric[metric]))
            except MissingMapsError as exc:
                notes.append(f"{unit['model']} / {unit['method']} / {metric}: {exc}; these settings need a new run")
        done.append({**unit, "metrics": metrics, "provenance": prov})
    results = RunStore(out).write_tables(done, suite.name)
    results.attrs["results_csv"] = str(out / "results.csv")
    record = {"suite": suite.to_dict(), "provenance": prov, "left_out": notes}
    atomic_write_text(out / "run.json", json.dumps(record, indent=2))
    flips = ranking_flips(read_results(run_dir / "results.csv"), results) if not results.empty else pd.DataFrame()
    if not flips.empty:
        flips.to_csv(out / "ranking_flips.csv", index=False)
    return results, flips, notes
