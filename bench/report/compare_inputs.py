"""The inputs of ``compare``: a run's results.csv, samples.csv and run.json, validated; every problem is one
line naming the file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from faithbench.bench.store.results import read_results
from faithbench.errors import UserError

KEY = ["model", "method", "metric"]
COUNTS = ["n", "n_undefined", "n_dropped"]
REQUIRED = [*KEY, "mean", "higher_is_better", *COUNTS, "params"]
FAILING = ["MISSING", "NEW", "PROTOCOL", "NAN", "COUNTS", "REGRESSED", "CHANGED", "ACCURACY"]
# Row columns that say what a score means, compared where both files have them (besides params).
ROW_PROTOCOL = ["aggregate", "unit", "seed"]
# Keys of params that change the cost columns, never the scores: the inputs per call, and the names of the method
# parameters that only batch a method's work (``AttributionMethod.cost_params``, e.g. IntegratedGradients' rows per
# pass), which the row records beside them.
COST_PARAMS = frozenset({"max_batch", "cost_params"})
# Suite settings (run.json) that change every score of the run, and those that only batch or split its work (the same
# samples and scores: reported, never failing).
SUITE_PROTOCOL = ["dataset", "seed", "n_samples"]
SUITE_COST = ["batch_size", "max_batch", "pieces"]
SHOWN = 3  # rows named per finding in the "what differs" header


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def key_text(key: tuple) -> str:
    return " / ".join(str(k) for k in key)


def _numeric(frame: pd.DataFrame, col: str, where: str) -> pd.Series:
    raw = frame[col]
    values = pd.to_numeric(raw, errors="coerce")
    bad = values.isna() & raw.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(
            f"{where}: column {col} holds a non-numeric value {raw.iloc[i]!r} "
            f"(row {key_text(tuple(frame[KEY].iloc[i]))})"
        )
    return values.astype(float)


_TRUE, _FALSE = {"true", "1", "1.0", "yes"}, {"false", "0", "0.0", "no"}


def _boolean(frame: pd.DataFrame, col: str, where: str) -> pd.Series:
    out = []
    for i, v in enumerate(frame[col]):
        text = str(v).strip().lower() if not isinstance(v, bool | np.bool_) else str(bool(v)).lower()
        if text not in _TRUE | _FALSE:
            raise UserError(
                f"{where}: column {col} holds {v!r}, not True or False (row {key_text(tuple(frame[KEY].iloc[i]))})"
            )
        out.append(text in _TRUE)
    return pd.Series(out, index=frame.index, dtype=bool)


def _params(frame: pd.DataFrame, where: str) -> tuple[list[dict], list[frozenset[str]]]:
    """Each row's params without the cost-only keys, and the names of its cost-only method parameters."""
    out, cost = [], []
    for i, v in enumerate(frame["params"]):
        if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
            out.append({})
            cost.append(frozenset())
            continue
        try:
            parsed = json.loads(v) if isinstance(v, str) else v
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            text = str(v) if len(str(v)) <= 60 else str(v)[:57] + "..."
            raise UserError(
                f"{where}: column params holds {text!r}, not a JSON object (row {key_text(tuple(frame[KEY].iloc[i]))})"
            )
        out.append({k: val for k, val in parsed.items() if k not in COST_PARAMS})
        names = parsed.get("cost_params")
        cost.append(frozenset(names) if isinstance(names, list) else frozenset())
    return out, cost


def without_cost(params: dict, names: frozenset[str]) -> dict:
    """``params`` with the method parameters ``names`` (cost only) left out of its ``method_params``."""
    method = params.get("method_params")
    if not names or not isinstance(method, dict):
        return params
    return {**params, "method_params": {k: v for k, v in method.items() if k not in names}}


def comparable(a: dict, b: dict, cost_a: frozenset[str], cost_b: frozenset[str]) -> tuple[dict, dict]:
    """Two rows' params as compared: without the cost-only method parameters either row names (a row written before
    rows named them names none, so the other's hold for both)."""
    names = cost_a | cost_b
    return without_cost(a, names), without_cost(b, names)


def load_results(path: Path, side: str) -> pd.DataFrame:
    """The rows of one side, validated; every problem is one line naming the file."""
    where = f"{side} {path}"
    frame = read_results(path)
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise UserError(
            f"{where} lacks the column(s) {', '.join(missing)} that compare needs to gate "
            f"(required: {', '.join(REQUIRED)})"
        )
    if frame.empty:
        raise UserError(f"{where} has no result rows (only a header): nothing to compare")
    frame = frame.reset_index(drop=True)
    for col in KEY:
        frame[col] = frame[col].astype(object).where(frame[col].notna(), "").astype(str)
    dup = frame[frame.duplicated(KEY, keep="first")]
    if len(dup):
        keys = list(dict.fromkeys(dup[KEY].itertuples(index=False, name=None)))
        shown = ", ".join(key_text(k) for k in keys[:SHOWN]) + (
            f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
        )
        raise UserError(
            f"{where} has {len(keys)} duplicated (model, method, metric) row{'s' if len(keys) != 1 else ''}: {shown}"
        )
    frame["mean"] = _numeric(frame, "mean", where)
    for col in COUNTS:
        frame[col] = _numeric(frame, col, where)
    frame["higher_is_better"] = _boolean(frame, "higher_is_better", where)
    frame["_params"], frame["_cost"] = _params(frame, where)
    return frame


def optional_table(path: Path, what: str, why: str) -> pd.DataFrame | None:
    """A run's per-sample or curve CSV (None when absent or empty); an unreadable one is a user error naming ``what``
    it is and ``why`` it is read."""
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise UserError(
            f"{what} {path} is not readable ({type(exc).__name__}: {str(exc).strip()}); {why}: regenerate the run "
            "or remove the file"
        ) from None


def load_samples(results_csv: Path, side: str) -> pd.DataFrame | None:
    """``samples.csv`` beside a results file (None when absent or empty); an unreadable one is a user error."""
    path = Path(results_csv).parent / "samples.csv"
    frame = optional_table(path, f"{side} samples file", "compare reads it for the confidence intervals")
    if frame is None or (frame.empty and len(frame.columns) <= 1):
        return None
    missing = [c for c in [*KEY, "sample_id", "value"] if c not in frame.columns]
    if missing:
        raise UserError(f"{side} samples file {path} lacks the column(s) {', '.join(missing)}")
    frame = frame[[*KEY, "sample_id", "value"]].copy()
    numeric = pd.to_numeric(frame["sample_id"], errors="coerce")
    whole = numeric.notna() & (numeric == numeric.round())  # 15.0 (an older file's) pairs with 15
    raw = frame["sample_id"].astype(object).astype(str)
    frame["sample_id"] = raw.where(~whole, numeric.where(whole, 0).astype("int64").astype(str))
    for col in KEY:
        frame[col] = frame[col].astype(object).astype(str)
    frame["value"] = _numeric(frame, "value", f"{side} samples file {path}")
    return frame


def load_run_record(results_csv: Path, side: str) -> dict | None:
    """``run.json`` beside a results file (None when there is none, or it records no suite settings)."""
    path = Path(results_csv).parent / "run.json"
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as exc:
        raise UserError(f"{side} run record {path} is not readable JSON ({type(exc).__name__}: {exc})") from None
    suite = record.get("suite") if isinstance(record, dict) else None
    return record if isinstance(suite, dict) else None
