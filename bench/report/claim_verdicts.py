"""The papers' claims (:mod:`faithbench.bench.report.paper_claims`) evaluated from finished runs: one row per claim
with the paper's figure and effect, the estimate here with its interval, the ratio of the two, whether the interval
contains the paper's effect, and an outcome from one rule (:mod:`faithbench.bench.report.claim_rule`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.claim_builds import at_build, builds_in, combined, finish
from faithbench.bench.report.claim_rule import (
    Estimate,
    Found,
    accuracy_difference,
    difference_text,
    effect_text,
    equivalence_text,
    fmt,
    one_sample,
    paired_accuracy_difference,
    paired_difference,
    pm,
)
from faithbench.bench.report.paper_claims import KINDS, MODEL_KINDS, Claim, Rules, load_claims

COLUMNS = [
    *("id", "block", "paper", "source", "finding", "paper_value", "suite", "metric", "expect", "here", "n"),
    *("paper_effect", "ratio", "contains_paper", "builds", "verdict", "cause"),
]


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
    # each row's explanation seconds and the inputs they explained (the cost claims; a run's results.csv has them)
    costs: Mapping[tuple[str, str, str], tuple[float, int]] = field(default_factory=dict)


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
    return RunData(suite, samples, params, models or {}, locality or {}, weights, explain_costs(first))


def explain_costs(results: pd.DataFrame) -> dict[tuple[str, str, str], tuple[float, int]]:
    """Each result row's explanation seconds and the inputs explained for it (``n`` scored plus ``n_undefined``),
    where the results have them."""
    if not {"explain_time_s", "n"} <= set(results):
        return {}
    undefined = results["n_undefined"] if "n_undefined" in results else 0
    inputs = (pd.to_numeric(results["n"], errors="coerce") + pd.to_numeric(undefined, errors="coerce")).fillna(0)
    seconds = pd.to_numeric(results["explain_time_s"], errors="coerce")
    keys = zip(results["model"], results["method"], results["metric"], strict=True)
    return {k: (float(t), int(n)) for k, t, n in zip(keys, seconds, inputs, strict=True) if t == t and n > 0}


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


def _untrained(claim: Claim, rules: Rules, models: Mapping[str, dict[str, Any]]) -> str | None:
    """Why a model of the claim's rows has not learned its task (it predicts fewer than ``min_predicted_classes``
    classes on its held-out items, as its build records), or None (a build that does not record it passes)."""
    for model in dict.fromkeys(r.model for r in claim.rows):
        k = models.get(model, {}).get("test_predicted_classes")
        if isinstance(k, int) and k < rules.min_predicted_classes:
            return f"{model} predicts {k} class{'es' * (k != 1)} on its held-out items"
    return None


def evaluate_claim(claim: Claim, rules: Rules, run: RunData | None) -> dict[str, Any]:
    """One claim's row (:data:`COLUMNS`): the estimate here (``here``, ``n`` clusters), the paper's effect beside
    it, and its outcome; over every build of the claim's models the run holds (:mod:`.claim_builds`)."""
    out = {c: getattr(claim, c) for c in COLUMNS if hasattr(claim, c)}
    out |= {"block": "extension" if claim.extension else "paper", "paper_effect": effect_text(claim)}
    out |= {"here": "", "n": 0, "ratio": float("nan"), "contains_paper": "", "builds": "", "cause": ""}
    if claim.kind == "untested":
        return out | {"verdict": f"not run ({claim.reason})"}
    if run is None:
        return out | {"verdict": f"not run (no {claim.suite} run given)"}
    estimate = _model_claim if claim.kind in MODEL_KINDS else _row_claim
    found = [estimate(at_build(claim, k), rules, run) for k in builds_in(claim, run)] or [estimate(claim, rules, run)]
    row = combined(claim, found, rules) if len(found) > 1 else finish(claim, found[0])
    if claim.not_comparable and not row["verdict"].startswith("not comparable"):  # rows a definition leaves out
        row = row | {"verdict": f"not comparable ({claim.not_comparable})", "cause": ""}
    return out | row


def _row_claim(claim: Claim, rules: Rules, run: RunData) -> Found | dict[str, Any]:
    """A claim on rows (model, method, metric) of the run's scores: its estimate, or why it has none."""
    if not any(key[2] == claim.metric for key in run.params):
        return {"verdict": f"not run ({claim.metric} not in the {claim.suite} run)"}
    missing = [str(r) for r in claim.rows if (r.model, r.method, claim.metric) not in run.params]
    if missing:
        return {"verdict": f"not run ({', '.join(missing)} not in the {claim.suite} run)"}
    if claim.kind == "cost":
        return _cost_claim(claim, run)
    why = _untrained(claim, rules, run.models) or _ineligible(claim, rules, run.locality) or _unshared(claim, run)
    if why:
        return {"verdict": f"not eligible ({why})"}
    d = claim.digits
    if claim.kind == "sign":
        e = one_sample(run.samples, claim.rows[0], claim.metric, rules.level)
        if e is None:
            return {"verdict": "not eligible (fewer than 2 scored samples)"}
        return Found(e, None, pm(e, d))
    a, b = (claim.rows[-1], claim.rows[0]) if claim.kind == "trend" else claim.rows
    e = paired_difference(run.samples, a, b, claim.metric, rules.level)
    if e is None:
        return {"verdict": "not eligible (fewer than 2 paired samples)"}
    eq = None
    if claim.expect == "equivalent":
        eq = paired_difference(run.samples, a, b, claim.metric, rules.equivalence_level)
    if claim.kind == "difference":
        return Found(e, eq, difference_text(e, d) + (equivalence_text(eq, claim, rules) if eq is not None else ""))
    levels = [one_sample(run.samples, r, claim.metric, rules.level) for r in claim.rows]
    shown = " → ".join(fmt(v.mean, d) if v is not None else "-" for v in levels)
    return Found(e, None, f"{shown}; endpoint {pm(e, d, True)}")


def _accuracy(info: dict[str, Any]) -> tuple[float, int] | None:
    p, n = info.get("test_accuracy"), info.get("n_test")
    return (float(p), int(n)) if isinstance(p, int | float) and isinstance(n, int) and n > 0 else None


def _correct(info: dict[str, Any]) -> np.ndarray | None:
    """The per-item results on the held-out items a run records of a model (``test_correct``, one 0/1 character
    per item in the test split's order), or None."""
    bits = info.get("test_correct")
    if not isinstance(bits, str) or not bits or set(bits) - {"0", "1"}:
        return None
    return np.frombuffer(bits.encode(), dtype=np.uint8) == ord("1")


def accuracy_estimate(a: dict[str, Any], b: dict[str, Any], level: float) -> tuple[Estimate, str] | None:
    """a - b of two models' held-out accuracies in points: paired on the items where both records hold per-item
    results of one length, else unpaired; with the pairing's name (None: an accuracy is not recorded)."""
    ca, cb = _correct(a), _correct(b)
    if ca is not None and cb is not None and len(ca) == len(cb):
        return paired_accuracy_difference(ca, cb, level), "paired"
    pa, pb = _accuracy(a), _accuracy(b)
    if pa is None or pb is None:
        return None
    return accuracy_difference(pa, pb, level), "unpaired"


def _model_claim(claim: Claim, rules: Rules, run: RunData) -> Found | dict[str, Any]:
    """An accuracy, recorded or speedup claim's estimate, from run.json's record of the models."""
    d = claim.digits
    if claim.kind == "recorded":
        values = [run.models.get(m, {}).get(claim.key) for m in claim.models]
        if any(not isinstance(v, int | float) for v in values):
            lacking = [m for m, v in zip(claim.models, values, strict=True) if not isinstance(v, int | float)]
            return {"verdict": f"not run (the {claim.suite} run records no {claim.key} of {', '.join(lacking)})"}
        a, b = (float(v) for v in values)
        here = f"{a:,.{d}f} vs {b:,.{d}f} {claim.key.replace('_', ' ')} (as recorded, no interval)"
        return Found(Estimate(a - b, a - b, a - b, 1, a, b), None, here, recorded=True)
    infos = [run.models.get(m, {}) for m in claim.models]
    if claim.kind == "speedup":
        return _speedup_claim(claim, infos)
    if lacking := [m for m, info in zip(claim.models, infos, strict=True) if _accuracy(info) is None]:
        return {"verdict": f"not run (the {claim.suite} run records no held-out accuracy of {', '.join(lacking)})"}
    a, b = (infos[-1], infos[0]) if claim.expect in KINDS["trend"] else infos
    (e, pairing), eq = accuracy_estimate(a, b, rules.level), None
    if claim.expect == "equivalent":
        eq, _ = accuracy_estimate(a, b, rules.equivalence_level)
    if claim.expect in KINDS["trend"]:
        levels = " → ".join(fmt(100 * _accuracy(i)[0], d) for i in infos)
        return Found(e, None, f"{levels} %; endpoint {pm(e, d, True)} points ({pairing})")
    here = f"{difference_text(e, d)} points ({pairing})" + (equivalence_text(eq, claim, rules) if eq else "")
    return Found(e, eq, here)


def epochs_to(curve: list[float], target: float) -> int | None:
    """The first epoch (1-based) whose held-out accuracy reaches ``target``, or None."""
    return next((i + 1 for i, a in enumerate(curve) if a >= target), None)


def _speedup_claim(claim: Claim, infos: list[dict[str, Any]]) -> Found | dict[str, Any]:
    curves = [i.get("test_accuracy_by_epoch") for i in infos]
    if lacking := [m for m, c in zip(claim.models, curves, strict=True) if not isinstance(c, list) or not c]:
        return {"verdict": f"not run (the {claim.suite} run records no accuracy by epoch of {', '.join(lacking)})"}
    fast, slow = curves
    target = max(slow)
    needed, reached = epochs_to(fast, target), epochs_to(slow, target)
    if needed is None:
        here = f"{claim.models[0]} stays below {100 * target:.1f} % in its {len(fast)} epochs (as recorded)"
        return Found(Estimate(0.0, 0.0, 0.0, 1), None, here, recorded=True, ratio=True)
    speedup = reached / needed
    here = f"{needed} vs {reached} epochs to {100 * target:.1f} %: {speedup:.1f}x (as recorded, no interval)"
    return Found(Estimate(speedup, speedup, speedup, 1), None, here, recorded=True, ratio=True)


def _cost_claim(claim: Claim, run: RunData) -> Found | dict[str, Any]:
    keys = [(r.model, r.method, claim.metric) for r in claim.rows]
    if lacking := [str(r) for r, k in zip(claim.rows, keys, strict=True) if k not in run.costs]:
        return {"verdict": f"not run (the {claim.suite} run records no explanation time of {', '.join(lacking)})"}
    (ta, na), (tb, nb) = (run.costs[k] for k in keys)
    a, b = ta / na, tb / nb
    if not a > 0:
        return {"verdict": "not run (no explanation time recorded)"}
    here = f"{a:.3g} vs {b:.3g} s per explained input: {b / a:.0f}x cheaper (as recorded, one unit each)"
    return Found(Estimate(b / a, b / a, b / a, 1), None, here, recorded=True, ratio=True)


def evaluate_claims(claims: tuple[Claim, ...], rules: Rules, runs: Mapping[str, RunData]) -> pd.DataFrame:
    """Every claim's row (:data:`COLUMNS`), from the runs by suite name."""
    rows = [evaluate_claim(c, rules, runs.get(c.suite)) for c in claims]
    return pd.DataFrame(rows, columns=COLUMNS)


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
