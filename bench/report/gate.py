"""``compare``: the CI gate between two runs, with paired bootstrap confidence intervals.

The gate compares two ``results.csv`` files row by row, keyed by (model, method, metric), but only
after checking that the rows are comparable: each file must have its required columns, at least
one row, numeric scores and counts and no duplicated key; the two runs must score with the same
protocol (each row's recorded ``params`` -- the metric's effective settings and the method's
parameters, ``max_batch`` aside -- its seed, unit, direction and aggregate, and the suites'
evaluation settings from the ``run.json`` beside each file). What differs between the runs (suite
names, model weights, protocol, rows on one side only) is listed before any score.
"""

from __future__ import annotations

import json
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
    SUITE_PROTOCOL,
    key_text,
    load_results,
    load_run_record,
    load_samples,
    plural,
)
from faithbench.errors import UserError

_ABSENT = object()  # a key on one side only


def paired_bootstrap(diffs: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference (resampling samples with replacement)."""
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(n_boot, diffs.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


# ----------------------------------------------------------------------------- differences


def _diff(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(dotted key, baseline value, new value) of every leaf that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, Any, Any]] = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [(prefix, a, b)]


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _changes(diffs: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{k} {_show(a)} → {_show(b)}" for k, a, b in diffs)


def _cell(value: Any) -> Any:
    """A row column's value as compared: NaN is empty, 3.0 is 3."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | float | np.integer | np.floating):
        number = float(value)
        return int(number) if number.is_integer() else number
    return str(value)


def _suite_names(frame: pd.DataFrame, record: dict | None) -> str:
    if "suite" in frame.columns:
        names = sorted({str(s) for s in frame["suite"].dropna()})
        if names:
            return ", ".join(names)
    if record and record.get("name"):
        return str(record["name"])
    return "?"


def _suite_differences(sb: dict, sn: dict) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """Protocol differences of the suites (every row's scores change) and lines reported only."""
    protocol = [(k, sb.get(k), sn.get(k)) for k in SUITE_PROTOCOL if sb.get(k) != sn.get(k)]
    reported = []
    if sb.get("data_root") != sn.get("data_root"):
        reported.append(
            f"data_root differs: {_show(sb.get('data_root'))} → {_show(sn.get('data_root'))} (reported only: the "
            "same data may lie at another path; the dataset name, sample counts and scores are gated)"
        )
    tables = [
        d
        for k in sorted(set(sb) & set(sn))
        if k != "method_params" and isinstance(sb[k], dict) and isinstance(sn[k], dict)
        for d in _diff(sb[k], sn[k], f"[{k}]")
    ]
    if tables:
        reported.append(
            f"suite metric settings differ: {_changes(tables[:6])}{' ...' if len(tables) > 6 else ''} "
            "(a row fails as PROTOCOL where its recorded params differ)"
        )
    return protocol, reported


def _weights(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    if "model_weights_sha256" not in base.columns or "model_weights_sha256" not in new.columns:
        return []
    lines = []
    for model in sorted(set(base["model"]) & set(new["model"])):
        hb = sorted({str(h) for h in base.loc[base["model"] == model, "model_weights_sha256"].dropna() if str(h)})
        hn = sorted({str(h) for h in new.loc[new["model"] == model, "model_weights_sha256"].dropna() if str(h)})
        if hb and hn and hb != hn:
            lines.append(f"{model} ({', '.join(h[:8] for h in hb)} → {', '.join(h[:8] for h in hn)})")
    if not lines:
        return []
    return [
        f"model weights differ for {', '.join(lines)}: those scores are of different weights "
        "(reported, not failing: a retrained model is gated on its scores)"
    ]


# ----------------------------------------------------------------------------- the gate


def _check_tolerance(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise UserError(f"--{name} must be a finite number >= 0, got {value}")


def compare(
    base_csv: Path,
    new_csv: Path,
    *,
    tolerance: float = 0.0,
    rel_tolerance: float = 0.0,
    two_sided: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
    allow_new_rows: bool = False,
    float_floors: Mapping[str, float] | None = None,
) -> tuple[pd.DataFrame, bool]:
    """Differences per (model, method, metric) and whether the gate fails.

    The allowed change of a row is ``max(tolerance, rel_tolerance * |baseline mean|, float floor)``, in the metric's
    reported unit; the float floor (``float_floors``: metric name -> floor, 0 where absent; the command line passes
    every registered metric's :attr:`~faithbench.metrics.spec.MetricSpec.float_floor`) is what float rounding alone
    moves the metric's mean. A row fails when it is missing from the
    new run (``MISSING``), when it is only in the new run (``NEW``; ``allow_new_rows`` accepts it as ``new``), when
    it was scored with another protocol (``PROTOCOL``: its params other than the cost-only ``max_batch`` and
    IntegratedGradients' ``internal_batch_size``, its seed, unit,
    direction or aggregate differ, or the suites' dataset, seed, n_samples or batch_size do), when a finite score
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
    rec_b, rec_n = load_run_record(base_csv, "baseline"), load_run_record(new_csv, "new")
    samples_b, samples_n = load_samples(base_csv, "baseline"), load_samples(new_csv, "new")

    row_cols = [c for c in ROW_PROTOCOL if c in base.columns and c in new.columns]
    cols = [*KEY, "mean", "higher_is_better", *COUNTS, "_params", *row_cols]
    merged = base[cols].merge(new[cols], on=KEY, how="outer", suffixes=("_base", "_new"), indicator=True)
    merged = merged.sort_values(KEY).reset_index(drop=True)
    both = (merged["_merge"] == "both").to_numpy()
    only_base = (merged["_merge"] == "left_only").to_numpy()
    only_new = (merged["_merge"] == "right_only").to_numpy()

    # Protocol: the suites' evaluation settings, then each row's recorded settings.
    differences: list[str] = []
    names = (_suite_names(base, rec_b), _suite_names(new, rec_n))
    if names[0] != names[1]:
        differences.append(f"suites differ: {names[0]} (baseline) vs {names[1]} (new)")
    suite_protocol: list[tuple[str, Any, Any]] = []
    if rec_b is not None and rec_n is not None:
        suite_protocol, reported = _suite_differences(rec_b, rec_n)
        if suite_protocol:
            differences.append(
                f"suite settings differ: {_changes(suite_protocol)}: every common row is PROTOCOL "
                "(the scores are of other samples or settings)"
            )
        differences += reported
    else:
        absent = [str(p.parent / "run.json") for p, r in ((base_csv, rec_b), (new_csv, rec_n)) if r is None]
        differences.append(
            f"no suite record {' or '.join(absent)}: the suites' settings are not compared (each row's params are)"
        )
    differences += _weights(base, new)

    detail = [""] * len(merged)
    row_diffs: list[tuple[tuple, list[tuple[str, Any, Any]]]] = []
    for i in np.flatnonzero(both):
        r = merged.iloc[i]
        diffs = [(f"suite.{k}", a, b) for k, a, b in suite_protocol]
        diffs += _diff(r["_params_base"], r["_params_new"], "params")
        if bool(r["higher_is_better_base"]) != bool(r["higher_is_better_new"]):
            diffs.append(("higher_is_better", bool(r["higher_is_better_base"]), bool(r["higher_is_better_new"])))
        for c in row_cols:
            a, b = _cell(r[f"{c}_base"]), _cell(r[f"{c}_new"])
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
            differences.append(f"  {key_text(key)}: {_changes([x for x in d if not x[0].startswith('suite.')][:4])}")
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
    allowed = np.maximum(tolerance, rel_tolerance * merged["mean_base"].abs().fillna(0.0).to_numpy())
    floors = merged["metric"].map(dict(float_floors or {})).fillna(0.0).to_numpy(dtype=float)
    allowed = np.maximum(allowed, floors)
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

    # Paired CIs, only over rows scored with the same protocol on both sides.
    ci_low, ci_high = np.full(len(merged), np.nan), np.full(len(merged), np.nan)
    if samples_b is not None and samples_n is not None:
        paired = samples_b.merge(samples_n, on=[*KEY, "sample_id"], suffixes=("_base", "_new"))
        paired["diff"] = paired["value_new"] - paired["value_base"]
        groups = {k: g["diff"].to_numpy() for k, g in paired.groupby(KEY)}
        for i in np.flatnonzero(both & ~protocol):
            k = tuple(merged.loc[i, KEY])
            if k in groups:
                ci_low[i], ci_high[i] = paired_bootstrap(groups[k], n_boot, seed)
    merged["delta_ci_low"], merged["delta_ci_high"] = ci_low, ci_high
    merged["counts"] = [
        "/".join(_count(merged.at[i, f"{c}_new"]) for c in COUNTS) if both[i] else "" for i in range(len(merged))
    ]
    table = merged[
        [*KEY, "mean_base", "mean_new", "delta", "delta_ci_low", "delta_ci_high", "counts", "status", "detail"]
    ].reset_index(drop=True)
    failed = bool(table["status"].isin(FAILING).any())
    table.attrs["differences"] = differences
    table.attrs["suites"] = names
    return table, failed


def _count(value: float) -> str:
    return "?" if value != value else str(int(value))
