"""Runs that combine: ``bench merge RUN_A RUN_B ... --out DIR`` (and ``bench report RUN_A RUN_B ...``) writes one run
folder whose leaderboard holds every run's rows, after the checks ``compare`` makes before it gates.

Refused, one line each: runs of another data set, seed or sample count (their paired statistics would pair other
images); a metric whose settings table differs between runs (its scores measure something else); a method whose
parameters differ; a (model, method, metric) row in several runs with other params. The same row in several runs
with the same params is kept once, from the first run that has it, and the largest difference of its means is said.
Reported only: another data root (the same data may lie at another path), cost settings, other weights of a model,
other numerics. The merged folder has ``results.csv``, ``samples.csv``, ``curves.csv``, ``skipped.json`` and a
``run.json`` whose suite lists every run's models, methods and metrics (no tiers; no units: ``rescore`` needs the
runs themselves) and whose ``merged_from`` names the runs; the paired statistics of its report pair each two methods
on the samples both scored, with the count shown (``n_paired``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from faithbench.bench.report.compare_inputs import (
    KEY,
    comparable,
    load_results,
    load_run_record,
    optional_table,
    without_cost,
)
from faithbench.bench.report.run_differences import changes, diff, provenance_differences, suite_differences, weights
from faithbench.bench.store.export import write_run_document
from faithbench.bench.store.results import atomic_write_csv, read_results
from faithbench.errors import UserError
from faithbench.io import atomic_write_text


@dataclass(frozen=True)
class Merged:
    """What a merge wrote: the folder, its results, and the lines it reports (duplicates kept once, differences that
    do not refuse)."""

    out: Path
    results: pd.DataFrame
    notes: list[str]


def results_file(path: str | Path) -> Path:
    """A run given as its folder or its results.csv."""
    path = Path(path)
    if path.is_dir() and not (path / "results.csv").is_file():
        raise UserError(f"{path} is a folder without a results.csv: give a run's folder or its results.csv")
    return path / "results.csv" if path.is_dir() else path


def _record(csv: Path, side: str) -> dict:
    record = load_run_record(csv, side)
    if record is None:
        raise UserError(f"{side}: no run.json with a suite beside {csv}; merge checks the runs' settings from it")
    return record


def _method_params(frame: pd.DataFrame, cost: dict[str, frozenset[str]]) -> dict[str, str]:
    """Each method's parameters as its rows record them (one JSON text per method), without those ``cost`` names
    for it (cost only)."""
    out = {}
    for method, params in zip(frame["method"], frame["_params"], strict=True):
        kept = without_cost(params, cost.get(method, frozenset()))
        out.setdefault(method, json.dumps(kept.get("method_params", {}), sort_keys=True))
    return out


def _cost_names(*frames: pd.DataFrame) -> dict[str, frozenset[str]]:
    """Per method, the cost-only parameters any row of ``frames`` names."""
    out: dict[str, frozenset[str]] = {}
    for frame in frames:
        for method, names in zip(frame["method"], frame["_cost"], strict=True):
            out[method] = out.get(method, frozenset()) | names
    return out


def _refusals(first: tuple, other: tuple, side: str) -> list[str]:
    (fb, rb), (fn, rn) = first, other
    sb, sn = rb["suite"], rn["suite"]
    protocol, _ = suite_differences(sb, sn)
    lines = [f"{side}: {changes(protocol)} (paired statistics need the same images)"] if protocol else []
    tables = {k for k in set(sb) & set(sn) if isinstance(sb[k], dict) and isinstance(sn[k], dict)} - {"method_params"}
    metric_tables = [d for k in sorted(tables) for d in diff(sb[k], sn[k], f"[{k}]")]
    if metric_tables:
        lines.append(f"{side}: metric settings differ: {changes(metric_tables[:6])} (the scores measure other things)")
    cost = _cost_names(fb, fn)
    mb, mn = _method_params(fb, cost), _method_params(fn, cost)
    methods = [m for m in sorted(set(mb) & set(mn)) if mb[m] != mn[m]]
    if methods:
        shown = ", ".join(f"{m} {mb[m]} → {mn[m]}" for m in methods[:3])
        lines.append(f"{side}: method parameters differ: {shown}")
    both = fb.merge(fn, on=KEY, suffixes=("", "_n"))
    pairs = zip(both["_params"], both["_params_n"], both["_cost"], both["_cost_n"], strict=True)
    other = both.loc[[a != b for a, b in (comparable(*p) for p in pairs)], KEY]
    if len(other):
        lines.append(f"{side}: {len(other)} row(s) in both runs with other params, e.g. {'/'.join(other.iloc[0])}")
    return lines


def merge_runs(runs: list[str | Path], out: Path) -> Merged:
    """Combine ``runs`` (folders or results.csv files) into the run folder ``out`` (see the module docstring)."""
    if len(runs) < 2:
        raise UserError("merge takes two runs or more (folders or results.csv files)")
    csvs = [results_file(r) for r in runs]
    sides = [f"run {i + 1} ({csv.parent})" for i, csv in enumerate(csvs)]
    loaded = [(load_results(csv, side), _record(csv, side)) for csv, side in zip(csvs, sides, strict=True)]
    refusals = [
        line for other, side in zip(loaded[1:], sides[1:], strict=True) for line in _refusals(loaded[0], other, side)
    ]
    if refusals:
        raise UserError("the runs are not comparable, so not merged:\n  " + "\n  ".join(refusals))
    notes = []
    for (frame, record), side in zip(loaded[1:], sides[1:], strict=True):
        _, reported = suite_differences(loaded[0][1]["suite"], record["suite"])
        notes += [f"{side}: {line}" for line in reported + weights(loaded[0][0], frame)]
        provenance = (loaded[0][1].get("provenance") or {}, record.get("provenance") or {})
        notes += [f"{side}: {line}" for line in provenance_differences(*provenance)]  # as compare reads them
    rows, owner = [], {}
    for i, csv in enumerate(csvs):
        frame = read_results(csv)
        frame["_key"] = _keys(frame)
        fresh = ~frame["_key"].isin(owner)
        for key in frame.loc[fresh, "_key"]:
            owner[key] = i
        rows.append(frame[fresh])
    means = pd.concat([f[[*KEY, "mean"]] for f, _ in loaded]).groupby(KEY)["mean"]
    spread = (means.max() - means.min())[means.count() > 1]
    if len(spread):
        notes.append(
            f"{len(spread)} row(s) in several runs with the same params, kept from the first run that has them "
            f"(largest difference of their means: {spread.max():.3g})"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = pd.concat(rows, ignore_index=True).drop(columns="_key")
    atomic_write_csv(out / "results.csv", results)
    for name in ("samples.csv", "curves.csv"):
        parts = [_owned(csv.parent / name, owner, i) for i, csv in enumerate(csvs)]
        parts = [p for p in parts if p is not None]
        if parts:
            atomic_write_csv(out / name, pd.concat(parts, ignore_index=True))
    skipped = {}
    for csv in csvs:
        try:
            skipped.update(json.loads((csv.parent / "skipped.json").read_text()))
        except (OSError, json.JSONDecodeError):
            pass
    atomic_write_text(out / "skipped.json", json.dumps(skipped, indent=2))
    atomic_write_text(out / "run.json", json.dumps(_merged_record([r for _, r in loaded], csvs), indent=2) + "\n")
    write_run_document(out, results)
    return Merged(out, results, notes)


def _owned(path: Path, owner: dict, i: int) -> pd.DataFrame | None:
    """The rows of a run's samples / curves file whose (model, method, metric) the merge took from run ``i``."""
    frame = optional_table(path, f"run {i + 1}'s", "merge copies its rows")
    return None if frame is None or frame.empty else frame[[owner.get(k) == i for k in _keys(frame)]]


def _keys(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """Each row's (model, method, metric), as text."""
    return list(zip(*(frame[c].astype(str) for c in KEY), strict=True))


def _merged_record(records: list[dict], csvs: list[Path]) -> dict:
    """run.json of the merged folder: the first run's suite with every run's models, methods and metrics, in order of
    appearance, no tiers; every model's accuracy line; where each part came from."""
    suite = dict(records[0]["suite"])
    for key in ("models", "methods", "metrics", "controls"):
        suite[key] = list(dict.fromkeys(v for r in records for v in r["suite"].get(key, [])))
    for r in records[1:]:
        for table, value in r["suite"].items():
            suite.setdefault(table, value)
    suite["tiers"], suite["name"] = [], "+".join(dict.fromkeys(str(r["suite"].get("name", "?")) for r in records))
    models = {}
    for r in records:
        for name, info in r.get("models", {}).items():
            models.setdefault(name, info)
    merged_from = [{"folder": str(csv.parent.resolve()), "suite": r["suite"].get("name"),
                    "git_revision": r.get("provenance", {}).get("git_revision")}
                   for r, csv in zip(records, csvs, strict=True)]  # fmt: skip
    keep = {k: records[0][k] for k in ("provenance", "catalog") if k in records[0]}
    return {"suite": suite, **keep, "models": models, "merged_from": merged_from}
