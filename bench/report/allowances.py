"""How far ``compare`` lets a score move before it fails, and the models' held-out accuracy checks.

A row may move by ``max(tolerance, rel_tolerance x |baseline|, float floor)`` in its reported unit. The defaults are
the ones that pass float noise and fail regressions: the absolute tolerance is :data:`ABS_TOLERANCE` of the unit's
full scale (``MetricSpec.scale``: 1e-6 for a score in [0, 1], 1e-4 points for a percentage), the relative one
:data:`REL_TOLERANCE`. Measured on the smoke suite (1,910 rows, the same weights), another ``--pieces``,
``--workers``, ``--batch-size`` or ``--max-batch`` moves a mean by at most 1.7e-4 of it; other CPU numerics than the
portable ones (``faithbench numerics``) move a few rows beyond (docs/cli.md, *The CI gate*).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from faithbench.bench.store.accuracy import accuracy_floor, run_accuracy

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
