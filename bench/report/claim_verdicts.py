"""The papers' claims (:mod:`faithbench.bench.report.paper_claims`) evaluated from finished runs: one row per claim
with the paper's figure, the estimate here with its interval, and a verdict from one rule (:func:`verdict`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.bench.report.paper_claims import KINDS, Claim, Row, Rules, load_claims

COLUMNS = ["id", "paper", "source", "finding", "paper_value", "suite", "metric", "expect", "here", "n", "verdict"]


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` clusters with its interval; for a difference also the two rows' means."""

    mean: float
    low: float
    high: float
    n: int
    a: float = float("nan")
    b: float = float("nan")


def verdict(expect: str, low: float, high: float) -> str:
    """The one verdict rule. A direction (``higher`` / ``positive`` / ``rising``, or their opposites) **holds** when
    the interval excludes 0 on its side, **fails** when it excludes 0 on the other side, and is **on par** when it
    contains 0; a claim of ``on par`` holds when the interval contains 0 and fails when it does not."""
    if expect == "on par":
        return "holds" if low <= 0 <= high else "fails"
    up = expect in ("higher", "positive", "rising")
    if (low > 0) if up else (high < 0):
        return "holds"
    if (high < 0) if up else (low > 0):
        return "fails"
    return "on par"


def combined(verdicts: list[str]) -> str:
    """A trend's verdict from its steps': fails if any step fails, holds if every step holds, else on par."""
    return "fails" if "fails" in verdicts else "holds" if all(v == "holds" for v in verdicts) else "on par"


def _interval(values: np.ndarray, level: float) -> tuple[float, float, float]:
    n = len(values)
    mean = float(values.mean())
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * values.std(ddof=1) / np.sqrt(n))
    return mean, mean - half, mean + half


def _values(samples: pd.DataFrame, row: Row, metric: str) -> pd.Series:
    part = samples[(samples["model"] == row.model) & (samples["method"] == row.method) & (samples["metric"] == metric)]
    values = part.set_index(["cluster_id", "sample_id"])["value"]
    return values[np.isfinite(values.to_numpy(dtype=float))]


def paired_difference(samples: pd.DataFrame, a: Row, b: Row, metric: str, level: float) -> Estimate | None:
    """a - b on the samples both rows scored: per-sample differences, averaged per cluster, t interval over the
    clusters (None: fewer than 2 clusters in common)."""
    both = pd.concat([_values(samples, a, metric), _values(samples, b, metric)], axis=1, join="inner").dropna()
    per_cluster = both.groupby(level="cluster_id").mean()
    if len(per_cluster) < 2:
        return None
    diffs = (per_cluster.iloc[:, 0] - per_cluster.iloc[:, 1]).to_numpy()
    mean, low, high = _interval(diffs, level)
    a, b = (float(per_cluster.iloc[:, k].mean()) for k in (0, 1))
    return Estimate(mean, low, high, len(diffs), a, b)


def one_sample(samples: pd.DataFrame, a: Row, metric: str, level: float) -> Estimate | None:
    """The row's mean over its clusters with a t interval (None: fewer than 2 clusters)."""
    per_cluster = _values(samples, a, metric).groupby(level="cluster_id").mean().to_numpy()
    if len(per_cluster) < 2:
        return None
    mean, low, high = _interval(per_cluster, level)
    return Estimate(mean, low, high, len(per_cluster))


# ----------------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class RunData:
    """What the claims read from one finished run: its per-sample scores (first runs, undefined samples NaN) and
    the recorded params of each (model, method, metric) row."""

    suite: str
    samples: pd.DataFrame
    params: Mapping[tuple[str, str, str], dict[str, Any]]
    models: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # run.json's record of each model
    locality: Mapping[str, float] = field(default_factory=dict)  # the locality check's cell wins, by model
    weights: Mapping[str, str] = field(default_factory=dict)  # the weights each model was scored with (sha256)


def run_data(
    suite: str,
    results: pd.DataFrame,
    samples: pd.DataFrame,
    models: dict | None = None,
    locality: Mapping[str, float] | None = None,
) -> RunData:
    first = results[results["rerun_of"].isna()] if "rerun_of" in results else results
    params = {
        (m, j, k): json.loads(p) if isinstance(p, str) and p else {}
        for m, j, k, p in zip(first["model"], first["method"], first["metric"], first["params"], strict=True)
    }
    if "rerun_of" in samples:
        samples = samples[samples["rerun_of"].isna()]
    # the segments of one sequence (sample id = sequence * n_segments + segment) share their input, so the
    # sequence is the cluster of the intervals
    segmented = pd.Series({k: p["n_segments"] for k, p in params.items() if isinstance(p.get("n_segments"), int)})
    if (segmented > 1).any():
        keys = pd.MultiIndex.from_frame(samples[["model", "method", "metric"]])
        n = segmented.reindex(keys).fillna(0).to_numpy(dtype=np.int64)
        samples = samples.assign(
            cluster_id=np.where(n > 1, samples["sample_id"] // np.maximum(n, 1), samples["cluster_id"])
        )
    weights = {}
    if "model_weights_sha256" in first:
        weights = dict(zip(first["model"], first["model_weights_sha256"].astype(str), strict=True))
    return RunData(suite, samples, params, models or {}, locality or {}, weights)


def _unshared(claim: Claim, run: RunData) -> str | None:
    """Why rows of different models cannot be paired (their items were chosen per model), or None."""
    if len({r.model for r in claim.rows}) < 2:
        return None
    shapes = set()
    for row in claim.rows:
        p = run.params.get((row.model, row.method, claim.metric), {})
        if not str(p.get("pairing", "shared")).startswith("shared") or p.get("sequences_from") == "per-model":
            return f"{row.model}'s items were chosen per model, not shared"
        shapes.add((p.get("grid_size"), p.get("cluster_size")))
    if len(shapes) > 1:  # e.g. a CNN's 3 x 3 grids and a ViT's 2 x 2 grids: the same ids name other items
        return "the rows' items have different shapes (grid or cluster sizes), so they are not the same items"
    return None


def _ineligible(claim: Claim, rules: Rules, locality: Mapping[str, float]) -> str | None:
    """Why the locality rule keeps the claim out (``locality``: cell wins of the models of the claim's run)."""
    if claim.metric not in rules.locality_metrics:
        return None
    for model in dict.fromkeys(r.model for r in claim.rows):
        wins = locality.get(model)
        if wins is None or wins != wins:
            return f"{model}: no locality check"
        if wins < rules.min_cell_wins:
            return f"{model}: cells win {100 * wins:.1f} %"
    return None


def _fmt(value: float, digits: int, sign: bool = False) -> str:
    return f"{value:{'+' if sign else ''}.{digits}f}"


def _pm(e: Estimate, digits: int, sign: bool = False) -> str:
    """``mean ± half-width``."""
    return f"{_fmt(e.mean, digits, sign)} ± {_fmt((e.high - e.low) / 2, digits)}"


def _difference_text(e: Estimate, digits: int) -> str:
    return f"{_fmt(e.a, digits)} vs {_fmt(e.b, digits)}: {_pm(e, digits, True)}"


def _trend(levels: list[float], steps: list[Estimate], expect: str, digits: int, unit: str = "") -> dict[str, Any]:
    """A trend's row: its levels, each step's later-minus-earlier estimate, the steps' combined verdict."""
    step = "higher" if expect == "rising" else "lower"
    text = ", ".join(_pm(e, digits, True) for e in steps)
    return {
        "here": f"{' → '.join(_fmt(v, digits) for v in levels)}{unit}; steps {text}",
        "n": min(e.n for e in steps),
        "verdict": combined([verdict(step, e.low, e.high) for e in steps]),
    }


def evaluate_claim(claim: Claim, rules: Rules, run: RunData | None) -> dict[str, Any]:
    """One claim's row: the estimate here (``here``, ``n`` clusters) and its verdict."""
    out = {c: getattr(claim, c) for c in COLUMNS if hasattr(claim, c)} | {"here": "", "n": 0}
    if claim.kind == "untested":
        return out | {"verdict": f"not run ({claim.reason})"}
    if run is None:
        return out | {"verdict": f"not run (no {claim.suite} run given)"}
    if claim.kind in ("accuracy", "recorded"):
        return out | _model_claim(claim, rules, run)
    if not any(key[2] == claim.metric for key in run.params):
        return out | {"verdict": f"not run ({claim.metric} not in the {claim.suite} run)"}
    missing = [str(r) for r in claim.rows if (r.model, r.method, claim.metric) not in run.params]
    if missing:
        return out | {"verdict": f"not run ({', '.join(missing)} not in the {claim.suite} run)"}
    why = _ineligible(claim, rules, run.locality) or _unshared(claim, run)
    if why:
        return out | {"verdict": f"not eligible ({why})"}
    d = claim.digits
    if claim.kind == "sign":
        e = one_sample(run.samples, claim.rows[0], claim.metric, rules.level)
        if e is None:
            return out | {"verdict": "not eligible (fewer than 2 scored samples)"}
        return out | {"here": _pm(e, d), "n": e.n, "verdict": verdict(claim.expect, e.low, e.high)}
    pairs = list(zip(claim.rows[1:], claim.rows[:-1], strict=True)) if claim.kind == "trend" else [claim.rows]
    estimates = [paired_difference(run.samples, a, b, claim.metric, rules.level) for a, b in pairs]
    if any(e is None for e in estimates):
        return out | {"verdict": "not eligible (fewer than 2 paired samples)"}
    if claim.kind == "difference":
        (e,) = estimates
        return out | {"here": _difference_text(e, d), "n": e.n, "verdict": verdict(claim.expect, e.low, e.high)}
    return out | _trend([estimates[0].b, *(e.a for e in estimates)], estimates, claim.expect, d)


def _accuracy(info: dict[str, Any]) -> tuple[float, int] | None:
    p, n = info.get("test_accuracy"), info.get("n_test")
    return (float(p), int(n)) if isinstance(p, int | float) and isinstance(n, int) and n > 0 else None


def accuracy_difference(a: tuple[float, int], b: tuple[float, int], level: float) -> Estimate:
    """a - b of two held-out accuracies in points, with the unpaired (Wald) interval of two proportions."""
    (pa, na), (pb, nb) = a, b
    half = float(stats.norm.ppf(0.5 + level / 2) * np.sqrt(pa * (1 - pa) / na + pb * (1 - pb) / nb))
    d = pa - pb
    return Estimate(100 * d, 100 * (d - half), 100 * (d + half), min(na, nb), 100 * pa, 100 * pb)


def _model_claim(claim: Claim, rules: Rules, run: RunData) -> dict[str, Any]:
    """An accuracy or recorded claim's estimate and verdict, from run.json's record of the models."""
    d = claim.digits
    if claim.kind == "recorded":
        values = [run.models.get(m, {}).get(claim.key) for m in claim.models]
        if any(not isinstance(v, int | float) for v in values):
            lacking = [m for m, v in zip(claim.models, values, strict=True) if not isinstance(v, int | float)]
            return {"verdict": f"not run (the {claim.suite} run records no {claim.key} of {', '.join(lacking)})"}
        a, b = (float(v) for v in values)
        here = f"{a:,.{d}f} vs {b:,.{d}f} {claim.key.replace('_', ' ')} (as recorded, no interval)"
        return {"here": here, "n": 1, "verdict": f"{verdict(claim.expect, a - b, a - b)} (as recorded)"}
    accuracies = [_accuracy(run.models.get(m, {})) for m in claim.models]
    if any(a is None for a in accuracies):
        lacking = [m for m, a in zip(claim.models, accuracies, strict=True) if a is None]
        return {"verdict": f"not run (the {claim.suite} run records no held-out accuracy of {', '.join(lacking)})"}
    if claim.expect in KINDS["difference"]:
        e = accuracy_difference(accuracies[0], accuracies[1], rules.level)
        here = f"{_difference_text(e, d)} points (unpaired)"
        return {"here": here, "n": e.n, "verdict": verdict(claim.expect, e.low, e.high)}
    steps = [accuracy_difference(b, a, rules.level) for a, b in zip(accuracies, accuracies[1:], strict=False)]
    row = _trend([100 * p for p, _ in accuracies], steps, claim.expect, d, unit=" %")
    return row | {"here": f"{row['here']} (unpaired)"}


def evaluate_claims(claims: tuple[Claim, ...], rules: Rules, runs: Mapping[str, RunData]) -> pd.DataFrame:
    """Every claim's row (:data:`COLUMNS`), from the runs by suite name."""
    rows = [evaluate_claim(c, rules, runs.get(c.suite)) for c in claims]
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict_table(table: pd.DataFrame) -> str:
    """The claims as a Markdown table (the results page's is this, generated)."""
    head = (
        "| paper | claim | paper's figure | here (± 95 % interval) | n | verdict |\n"
        "| --- | --- | --- | --- | ---: | --- |"
    )
    lines = [
        f"| {r.paper} {r.source} | {r.finding} | {r.paper_value} | {r.here or '-'} | {r.n or '-'} | {r.verdict} |"
        for r in table.itertuples()
    ]
    return "\n".join([head, *lines]) + "\n"


# ----------------------------------------------------------------------------------------------- the run's record

LOCALITY_FILE = "locality.csv"  # in a run folder: model, cell_wins, as `bench verdicts` measured them


def read_locality(run_dir: Path) -> dict[str, float]:
    """The locality check's cell wins recorded in a run folder (none recorded: empty)."""
    try:
        frame = pd.read_csv(Path(run_dir) / LOCALITY_FILE)
        return {str(m): float(w) for m, w in zip(frame["model"], frame["cell_wins"], strict=True)}
    except (OSError, KeyError, ValueError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return {}


def run_claims(
    run_dir: Path, suite: str, results: pd.DataFrame, read: Callable[[Path], pd.DataFrame | None]
) -> pd.DataFrame:
    """The shipped claims that ``suite``'s run decides, evaluated from its files (the report's section); empty when
    the suite has none or the run has no per-sample scores (``read(run_dir)`` reads them, only when needed)."""
    rules, claims = load_claims()
    mine = tuple(c for c in claims if c.suite == suite and c.kind != "untested")
    samples = read(run_dir) if mine and "params" in results else None
    if samples is None:
        return pd.DataFrame(columns=COLUMNS)
    try:
        models = json.loads((Path(run_dir) / "run.json").read_text()).get("models")
    except (OSError, json.JSONDecodeError, AttributeError):
        models = None
    run = run_data(suite, results, samples, models, read_locality(run_dir))
    return evaluate_claims(mine, rules, {suite: run})
