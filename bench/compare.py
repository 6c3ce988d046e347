"""``compare``: the CI gate between two runs, with paired bootstrap confidence intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.report import read_results

KEY = ["model", "method", "metric"]


def _samples(results_csv: Path) -> pd.DataFrame | None:
    path = Path(results_csv).parent / "samples.csv"
    if not path.exists() or path.stat().st_size <= 1:
        return None
    return pd.read_csv(path)


def _count(value: float) -> str:
    return "?" if value != value else str(int(value))


def paired_bootstrap(diffs: np.ndarray, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference (resampling samples with replacement)."""
    diffs = diffs[np.isfinite(diffs)]
    if diffs.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, diffs.size, size=(n_boot, diffs.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


COUNTS = ["n", "n_undefined", "n_dropped"]
FAILING = ["MISSING", "REGRESSED", "CHANGED", "NAN", "COUNTS"]


def compare(
    base_csv: Path,
    new_csv: Path,
    *,
    tolerance: float = 0.0,
    rel_tolerance: float = 0.0,
    two_sided: bool = False,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[pd.DataFrame, bool]:
    """Differences per (model, method, metric) and whether the gate fails.

    The allowed change of a row is ``max(tolerance, rel_tolerance * |baseline mean|)``, in the
    metric's reported unit. A row fails when its score got worse by more than that
    (direction-aware, ``REGRESSED``), when it is missing from the new run (``MISSING``), when a
    finite score became NaN (``NAN``), when its sample counts ``n``, ``n_undefined`` or
    ``n_dropped`` changed (``COUNTS``), or -- with ``two_sided`` -- when it moved by more than the
    allowance either way or a NaN score became finite (``CHANGED``).
    """
    base, new = read_results(base_csv), read_results(new_csv)
    counts = [c for c in COUNTS if c in base.columns and c in new.columns]
    merged = base[KEY + ["mean", "higher_is_better", *counts]].merge(
        new[KEY + ["mean", *counts]], on=KEY, how="outer", suffixes=("_base", "_new"), indicator=True
    )
    merged["delta"] = merged["mean_new"] - merged["mean_base"]
    sign = np.where(merged["higher_is_better"].fillna(True).astype(bool), -1.0, 1.0)
    worse = sign * merged["delta"]  # > 0: the new score is worse
    allowed = np.maximum(tolerance, rel_tolerance * merged["mean_base"].abs().fillna(0.0))
    both = merged["_merge"] == "both"
    base_finite, new_finite = np.isfinite(merged["mean_base"]), np.isfinite(merged["mean_new"])
    counts_changed = np.zeros(len(merged), dtype=bool)
    for c in counts:
        counts_changed |= (merged[f"{c}_base"] != merged[f"{c}_new"]).to_numpy()
    status = np.select(
        [
            merged["_merge"] == "left_only",
            merged["_merge"] == "right_only",
            both & base_finite & ~new_finite,
            both & counts_changed,
            worse > allowed,
            two_sided & ((merged["delta"].abs() > allowed) | (both & ~base_finite & new_finite)),
            (worse < -allowed) | (both & ~base_finite & new_finite),
        ],
        ["MISSING", "new", "NAN", "COUNTS", "REGRESSED", "CHANGED", "improved"],
        default="ok",
    )
    merged["status"] = status
    ci_low, ci_high = np.full(len(merged), np.nan), np.full(len(merged), np.nan)
    sb, sn = _samples(base_csv), _samples(new_csv)
    if sb is not None and sn is not None:
        paired = sb.merge(sn, on=KEY + ["sample_id"], suffixes=("_base", "_new"))
        paired["diff"] = paired["value_new"] - paired["value_base"]
        groups = {k: g["diff"].to_numpy() for k, g in paired.groupby(KEY)}
        for i, k in enumerate(merged[KEY].itertuples(index=False, name=None)):
            if k in groups:
                ci_low[i], ci_high[i] = paired_bootstrap(groups[k], n_boot, seed)
    merged["delta_ci_low"], merged["delta_ci_high"] = ci_low, ci_high
    merged["counts"] = [
        "" if not counts or r["_merge"] != "both" else "/".join(_count(r[f"{c}_new"]) for c in counts)
        for _, r in merged.iterrows()
    ]
    table = merged[KEY + ["mean_base", "mean_new", "delta", "delta_ci_low", "delta_ci_high", "counts", "status"]]
    failed = bool(table["status"].isin(FAILING).any())
    return table.sort_values(KEY).reset_index(drop=True), failed
