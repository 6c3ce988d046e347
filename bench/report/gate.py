"""``compare``: the CI gate between two runs, with paired bootstrap confidence intervals.

The gate compares two ``results.csv`` files row by row, keyed by (model, method, metric), but only
after checking that the rows are comparable: each file must have its required columns, at least
one row, numeric scores and counts and no duplicated key; the two runs must score with the same
protocol (each row's recorded ``params`` -- the metric's effective settings and the method's
parameters, ``max_batch`` aside -- its seed, unit, direction and aggregate, and the suites'
evaluation settings from the ``run.json`` beside each file). What differs between the runs (suite
names, model weights, protocol, rows on one side only) is listed before any score.

How far a score may move before it fails (:func:`allowances`), and the models' held-out accuracy checks: a row may
move by ``max(tolerance, rel_tolerance x |baseline|, float floor)`` in its reported unit. The defaults are
the ones that pass float noise and fail regressions: the absolute tolerance is :data:`ABS_TOLERANCE` of the unit's
full scale (``MetricSpec.scale``: 1e-6 for a score in [0, 1], 1e-4 points for a percentage), the relative one
:data:`REL_TOLERANCE`. Measured on the smoke suite (1,910 rows, the same weights), another ``--pieces``,
``--workers``, ``--batch-size`` or ``--max-batch`` moves a mean by at most 1.7e-4 of it; other CPU numerics than the
portable ones (``faithbench numerics``) move a few rows beyond (docs/cli.md, *The CI gate*).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.compare_inputs import (
    COUNTS,
    FAILING,
    KEY,
    ROW_PROTOCOL,
    SHOWN,
    comparable,
    key_text,
    load_results,
    load_run_record,
    load_samples,
    plural,
)
from faithbench.bench.report.run_differences import (
    cell,
    changes,
    diff,
    provenance_differences,
    suite_differences,
    suite_names,
    weights,
)
from faithbench.bench.store.accuracy import accuracy_floor, run_accuracy
from faithbench.errors import UserError

ABS_TOLERANCE = 1e-6  # of the unit's full scale (``scale``: 1 for [0, 1] scores, 100 for percentages)
REL_TOLERANCE = 1e-3  # of the baseline's |mean|
ACCURACY_DROP = 5.0  # percentage points a model's held-out accuracy may fall below the baseline's
ACCURACY_METHOD, ACCURACY_METRIC = "(model)", "held_out_accuracy"  # the key of a model's accuracy row


def full_scales(metrics: pd.Series, units: pd.Series, scales: Mapping[str, float]) -> np.ndarray:
    """Each row's full scale: its metric's registered ``scale`` (``scales``), else 100 for a ``%`` unit, else 1."""
    known = metrics.map(dict(scales)).to_numpy(dtype=float)
    by_unit = np.where(units.fillna("").astype(str).to_numpy() == "%", 100.0, 1.0)
    return np.where(np.isfinite(known), known, by_unit)


def allowances(
    frame: pd.DataFrame,
    *,
    tolerance: float | None,
    rel_tolerance: float,
    floors: Mapping[str, float],
    scales: Mapping[str, float],
) -> np.ndarray:
    """The change each row of ``frame`` (columns ``metric``, ``unit``, ``mean_base``) may make; ``tolerance`` None:
    :data:`ABS_TOLERANCE` of each row's full scale."""
    if tolerance is None:
        absolute = ABS_TOLERANCE * full_scales(
            frame["metric"], frame.get("unit", pd.Series("", index=frame.index)), scales
        )
    else:
        absolute = np.full(len(frame), float(tolerance))
    relative = rel_tolerance * frame["mean_base"].abs().fillna(0.0).to_numpy()
    floor = frame["metric"].map(dict(floors)).fillna(0.0).to_numpy(dtype=float)
    return np.maximum(np.maximum(absolute, relative), floor)


def accuracy_checks(
    rec_b: dict | None, rec_n: dict | None, *, floor: float | None, max_drop: float
) -> tuple[pd.DataFrame, list[str]]:
    """One row per model of the new run with a held-out accuracy (run.json's ``models[m]["run_accuracy"]``): its
    accuracy in % on both sides and ``ACCURACY`` where the new one is not above the floor (``floor`` in %, None: the
    run's own, chance plus three standard errors) or fell more than ``max_drop`` points below the baseline's on the
    same items. Also the lines for the header: a baseline's accuracy of other items, a new run that records none."""
    base, new = run_accuracy(rec_b), run_accuracy(rec_n)
    rows, notes = [], []
    for model, acc in new.items():
        value = 100 * acc["correct"] / acc["n"]
        limit = floor if floor is not None else 100 * accuracy_floor(acc["chance"], acc["n"])
        before = base.get(model)
        same_items = before is not None and (before["n"], before.get("data")) == (acc["n"], acc.get("data"))
        old = 100 * before["correct"] / before["n"] if same_items else float("nan")
        status, detail = "ok", ""
        if value <= limit:
            status, detail = "ACCURACY", f"not above the floor {limit:.1f} % (chance {100 * acc['chance']:.1f} %)"
        elif same_items and old - value > max_drop:
            status, detail = "ACCURACY", f"fell {old - value:.1f} points (more than {max_drop:g})"
        if before is not None and not same_items:
            notes.append(f"{model}: held-out accuracy of other items in the baseline: not compared")
        rows.append(
            {"model": model, "method": ACCURACY_METHOD, "metric": ACCURACY_METRIC, "mean_base": old,
             "mean_new": value, "delta": value - old, "status": status, "detail": detail, "allowed": max_drop}
        )  # fmt: skip
    if base and not new:
        notes.append("the new run records no held-out accuracy (run.json models.*.run_accuracy): not checked")
    return pd.DataFrame(rows), notes


def paired_bootstrap(diffs: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference (resampling samples with replacement)."""
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(n_boot, diffs.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


# ----------------------------------------------------------------------------- the gate


def _check_tolerance(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, int | float) or not math.isfinite(value) or value < 0):
        raise UserError(f"--{name} must be a finite number >= 0, got {value}")


def compare(
    base_csv: Path,
    new_csv: Path,
    *,
    tolerance: float | None = None,
    rel_tolerance: float = REL_TOLERANCE,
    two_sided: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    allow_new_rows: bool = False,
    float_floors: Mapping[str, float] | None = None,
    scales: Mapping[str, float] | None = None,
    accuracy_floor: float | None = None,
    max_accuracy_drop: float = ACCURACY_DROP,
) -> tuple[pd.DataFrame, bool]:
    """Differences per (model, method, metric) and whether the gate fails.

    The allowed change of a row (column ``allowed``) is ``max(tolerance, rel_tolerance * |baseline mean|, float
    floor)``, in the metric's reported unit (:func:`allowances`): ``tolerance`` None is
    1e-6 of the unit's full scale (``scales``: metric name -> ``MetricSpec.scale``; absent: 100 for a ``%`` unit,
    else 1); the float floor (``float_floors``: metric name -> floor, 0 where absent; the command line passes
    every registered metric's :attr:`~faithbench.metrics.spec.MetricSpec.float_floor`) is what float rounding alone
    moves the metric's mean. A model of the new run whose held-out accuracy (run.json) is not above
    ``accuracy_floor`` (in %; None: chance plus three standard errors) or fell more than ``max_accuracy_drop``
    points below the baseline's is a row ``ACCURACY`` (method ``(model)``). A row fails when it is missing from the
    new run (``MISSING``), when it is only in the new run (``NEW``; ``allow_new_rows`` accepts it as ``new``), when
    it was scored with another protocol (``PROTOCOL``: its params other than the cost-only ``max_batch`` and the
    method parameters the row names cost-only (``cost_params``, e.g. IntegratedGradients' ``internal_batch_size``),
    its seed, unit,
    direction or aggregate differ, or the suites' dataset, seed or n_samples do), when a finite score
    became NaN (``NAN``), when its sample counts ``n``, ``n_undefined`` or ``n_dropped`` changed (``COUNTS``), when
    its score got worse by more than the allowance (direction-aware, ``REGRESSED``), or -- with ``two_sided`` --
    when it moved by more than the allowance either way or a NaN score became finite (``CHANGED``).

    A file without rows, without a required column, with a non-numeric score or count, with a
    duplicated key or with an unreadable ``samples.csv`` or ``run.json`` beside it, and a tolerance
    that is not a finite number >= 0, are :class:`UserError`. ``table.attrs["differences"]`` lists
    what differs between the runs (suites, weights, protocol, rows on one side), to print before
    the scores; ``table.attrs["suites"]`` holds the two suite names.
    """
    _check_tolerance("tolerance", tolerance)
    _check_tolerance("rel-tolerance", rel_tolerance)
    base_csv, new_csv = Path(base_csv), Path(new_csv)
    base, new = load_results(base_csv, "baseline"), load_results(new_csv, "new")
    run_b, run_n = load_run_record(base_csv, "baseline"), load_run_record(new_csv, "new")
    rec_b, rec_n = (r.get("suite") if r is not None else None for r in (run_b, run_n))
    samples_b, samples_n = load_samples(base_csv, "baseline"), load_samples(new_csv, "new")

    row_cols = [c for c in ROW_PROTOCOL if c in base.columns and c in new.columns]
    cols = [*KEY, "mean", "higher_is_better", *COUNTS, "_params", "_cost", *row_cols]
    merged = base[cols].merge(new[cols], on=KEY, how="outer", suffixes=("_base", "_new"), indicator=True)
    merged = merged.sort_values(KEY).reset_index(drop=True)
    both = (merged["_merge"] == "both").to_numpy()
    only_base = (merged["_merge"] == "left_only").to_numpy()
    only_new = (merged["_merge"] == "right_only").to_numpy()

    # Protocol: the suites' evaluation settings, then each row's recorded settings.
    differences: list[str] = []
    names = (suite_names(base, rec_b), suite_names(new, rec_n))
    if names[0] != names[1]:
        differences.append(f"suites differ: {names[0]} (baseline) vs {names[1]} (new)")
    suite_protocol: list[tuple[str, Any, Any]] = []
    if rec_b is not None and rec_n is not None:
        suite_protocol, reported = suite_differences(rec_b, rec_n)
        if suite_protocol:
            differences.append(
                f"suite settings differ: {changes(suite_protocol)}: every common row is PROTOCOL "
                "(the scores are of other samples or settings)"
            )
        differences += reported
    else:
        absent = [str(p.parent / "run.json") for p, r in ((base_csv, rec_b), (new_csv, rec_n)) if r is None]
        differences.append(
            f"no suite record {' or '.join(absent)}: the suites' settings are not compared (each row's params are)"
        )
    differences += weights(base, new)
    if run_b is not None and run_n is not None:
        differences += provenance_differences(run_b.get("provenance") or {}, run_n.get("provenance") or {})

    detail = [""] * len(merged)
    row_diffs: list[tuple[tuple, list[tuple[str, Any, Any]]]] = []
    for i in np.flatnonzero(both):
        r = merged.iloc[i]
        diffs = [(f"suite.{k}", a, b) for k, a, b in suite_protocol]
        diffs += diff(*comparable(r["_params_base"], r["_params_new"], r["_cost_base"], r["_cost_new"]), "params")
        if bool(r["higher_is_better_base"]) != bool(r["higher_is_better_new"]):
            diffs.append(("higher_is_better", bool(r["higher_is_better_base"]), bool(r["higher_is_better_new"])))
        for c in row_cols:
            a, b = cell(r[f"{c}_base"]), cell(r[f"{c}_new"])
            if a != b:
                diffs.append((c, a, b))
        if diffs:
            detail[i] = ", ".join(k for k, _, _ in diffs[:4]) + (" ..." if len(diffs) > 4 else "")
            row_diffs.append((tuple(r[KEY]), diffs))
    protocol = np.array([bool(d) for d in detail]) & both
    row_only = [(key, d) for key, d in row_diffs if any(not k.startswith("suite.") for k, _, _ in d)]
    if row_only:
        keys = Counter(k for _, d in row_only for k, _, _ in d if not k.startswith("suite."))
        differences.append(
            f"protocol differs on {plural(len(row_only), 'row')} (PROTOCOL, no confidence interval): "
            + ", ".join(f"{k} ({plural(n, 'row')})" for k, n in keys.most_common(6))
        )
        for key, d in row_only[:SHOWN]:
            differences.append(f"  {key_text(key)}: {changes([x for x in d if not x[0].startswith('suite.')][:4])}")
    if only_base.any():
        differences.append(f"{plural(int(only_base.sum()), 'row')} only in the baseline (MISSING)")
    if only_new.any():
        how = "new: accepted by --allow-new-rows" if allow_new_rows else "NEW: --allow-new-rows accepts them"
        differences.append(f"{plural(int(only_new.sum()), 'row')} only in the new run ({how})")

    # Scores and counts.
    merged["delta"] = merged["mean_new"] - merged["mean_base"]
    higher = merged["higher_is_better_base"].where(both | only_base, merged["higher_is_better_new"])
    sign = np.where(higher.fillna(True).astype(bool), -1.0, 1.0)
    worse = (sign * merged["delta"]).to_numpy()
    units = merged["unit_base"].fillna(merged["unit_new"]) if "unit" in row_cols else None
    allowed = allowances(
        merged.assign(unit=units) if units is not None else merged,
        tolerance=tolerance,
        rel_tolerance=rel_tolerance,
        floors=float_floors or {},
        scales=scales or {},
    )
    merged["allowed"] = allowed
    base_finite = np.isfinite(merged["mean_base"].to_numpy())
    new_finite = np.isfinite(merged["mean_new"].to_numpy())
    counts_changed = np.zeros(len(merged), dtype=bool)
    for c in COUNTS:
        a, b = merged[f"{c}_base"].to_numpy(), merged[f"{c}_new"].to_numpy()
        changed = (a != b) & ~(np.isnan(a) & np.isnan(b))
        counts_changed |= changed
        for i in np.flatnonzero(changed & both & ~protocol):
            step = f"{c} {_count(a[i])} → {_count(b[i])}"
            detail[i] = f"{detail[i]}, {step}" if detail[i] else step
    with np.errstate(invalid="ignore"):
        status = np.select(
            [
                only_base,
                only_new,
                protocol,
                both & base_finite & ~new_finite,
                both & counts_changed,
                worse > allowed,
                two_sided & ((np.abs(merged["delta"].to_numpy()) > allowed) | (both & ~base_finite & new_finite)),
                (worse < -allowed) | (both & ~base_finite & new_finite),
            ],
            [
                "MISSING",
                "new" if allow_new_rows else "NEW",
                "PROTOCOL",
                "NAN",
                "COUNTS",
                "REGRESSED",
                "CHANGED",
                "improved",
            ],
            default="ok",
        )
    merged["status"] = status
    merged["detail"] = detail

    # Paired CIs, only over rows scored with the same protocol on both sides, on their common samples.
    merged["delta_ci_low"], merged["delta_ci_high"], merged["n_paired"], why = _intervals(
        merged, both & ~protocol, samples_b, samples_n, n_boot, seed
    )
    if isinstance(why, str):
        differences.append(why)
    else:
        merged["detail"] = [", ".join(x for x in (d, w) if x) for d, w in zip(merged["detail"], why, strict=True)]
    merged["counts"] = [
        "/".join(_count(merged.at[i, f"{c}_new"]) for c in COUNTS) if both[i] else "" for i in range(len(merged))
    ]
    columns = [*KEY, "mean_base", "mean_new", "delta", "allowed", "delta_ci_low", "delta_ci_high", "n_paired"]
    table = merged[[*columns, "counts", "status", "detail"]].reset_index(drop=True)
    models, notes = accuracy_checks(run_b, run_n, floor=accuracy_floor, max_drop=max_accuracy_drop)
    differences += notes
    if len(models):  # the models' held-out accuracy, after their scores
        table = pd.concat([table, models.reindex(columns=table.columns)], ignore_index=True)
    failed = bool(table["status"].isin(FAILING).any())
    table.attrs["differences"] = differences
    table.attrs["suites"] = names
    return table, failed


def _count(value: float) -> str:
    return "?" if value != value else str(int(value))


def _intervals(
    merged: pd.DataFrame,
    rows: np.ndarray,
    samples_b: pd.DataFrame | None,
    samples_n: pd.DataFrame | None,
    n_boot: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | list[str]]:
    """The paired-bootstrap interval of each of ``rows`` over the samples both runs scored, that n, and why a row
    scored on both sides has none: one header line for the run, else a note per row."""
    low, high, n = np.full(len(merged), np.nan), np.full(len(merged), np.nan), np.zeros(len(merged), dtype=int)
    if samples_b is None or samples_n is None:
        side = " and ".join(s for s, f in (("baseline", samples_b), ("new", samples_n)) if f is None)
        return low, high, n, f"no per-sample scores (samples.csv) beside the {side} run: no confidence intervals"
    paired = samples_b.merge(samples_n, on=[*KEY, "sample_id"], suffixes=("_base", "_new"))
    paired["diff"] = paired["value_new"] - paired["value_base"]
    groups = {k: g["diff"].to_numpy() for k, g in paired.groupby(KEY)}
    scored = np.isfinite(merged["mean_base"].to_numpy()) & np.isfinite(merged["mean_new"].to_numpy())
    why = [""] * len(merged)
    for i in np.flatnonzero(rows):
        k = tuple(merged.loc[i, KEY])
        diffs = groups.get(k, np.zeros(0))
        n[i] = int(np.isfinite(diffs).sum())
        if n[i] >= 2:
            low[i], high[i] = paired_bootstrap(diffs, n_boot, seed)
        elif scored[i]:  # a score on both sides without an interval says why
            why[i] = f"no interval: {plural(n[i], 'sample')} scored in both runs"
    return low, high, n, why
