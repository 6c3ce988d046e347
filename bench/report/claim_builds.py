"""A claim over several builds of its models (``NAME``, ``NAME@2``, ...: :mod:`faithbench.models.zoo.builds`): one
estimate per build, each paired within its build, and the claim decided on their mean. Its interval adds the two
sources of variance: the spread of the K build means (s^2 / K) and the items' (the builds' mean squared standard
error: the builds score the same shared items, so the spread of their means alone would leave the items' noise
out), at the t quantile of the two terms' Welch-Satterthwaite degrees of freedom (K - 1 for the builds' spread,
n - 1 for the items': builds that agree keep the items' interval, builds that disagree widen it to K - 1's)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from scipy import stats

from faithbench.bench.report.claim_rule import (
    SUPPORTED,
    Estimate,
    Found,
    cause_text,
    decided,
    difference_text,
    directional,
    equivalence_text,
    fmt,
    pm,
)
from faithbench.bench.report.paper_claims import MODEL_KINDS, Claim, Row, Rules
from faithbench.build_names import build_name, split_build


def _models(claim: Claim) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*claim.models, *(r.model for r in claim.rows)]))


def with_builds_held(models: set[str], run: Any) -> set[str]:
    """``models`` and every build of them that ``run`` (a RunData) scored or records (``NAME@K``)."""
    held = {key[0] for key in run.params} | set(run.models)
    return models | {m for m in held if split_build(m)[0] in models}


def builds_in(claim: Claim, run: Any) -> list[int]:
    """The builds k of which ``run`` (a RunData) holds everything the claim reads (every row's scores, or every
    model's record), build 1 being the names themselves; empty when it holds no build completely (the claim then
    reads what its own names lack)."""
    names = set(_models(claim))
    held = set(run.models) if claim.kind in MODEL_KINDS else {key[0] for key in run.params}
    ks = sorted({split_build(m)[1] for m in held if split_build(m)[0] in names} - {0})

    def complete(k: int) -> bool:
        if claim.kind in MODEL_KINDS:
            return all(build_name(m, k) in run.models for m in claim.models)
        return all((build_name(r.model, k), r.method, claim.metric) in run.params for r in claim.rows)

    return [k for k in ks if complete(k)]


def at_build(claim: Claim, k: int) -> Claim:
    """The claim on build ``k`` of each of its models."""
    if k == 1:
        return claim
    rows = tuple(Row(model=build_name(r.model, k), method=r.method) for r in claim.rows)
    return replace(claim, rows=rows, models=tuple(build_name(m, k) for m in claim.models))


def finish(claim: Claim, found: Found | dict[str, Any]) -> dict[str, Any]:
    """One build's row: its outcome from the rule, or as recorded."""
    if isinstance(found, dict):
        return found
    row = decided(claim, found.e, found.eq, found.here)
    if not found.recorded or row["verdict"].startswith("not comparable"):
        return row
    v = found.e.mean
    outcome = ("holds" if v > 1 else "fails") if found.ratio else directional(claim.expect, v, v)
    cause = cause_text(claim) if outcome not in SUPPORTED else ""
    return row | {"verdict": f"{outcome} (as recorded)", "cause": cause}


def over_builds(
    means: np.ndarray,
    ses: np.ndarray,
    level: float,
    a: float = float("nan"),
    b: float = float("nan"),
    items: int | None = None,
) -> Estimate:
    """The mean of K per-build estimates with its interval: standard error sqrt(A + B), A = s^2 / K the builds'
    spread and B = mean(se^2) the items' noise the builds share, at the t quantile of the Welch-Satterthwaite
    degrees of freedom (A + B)^2 / (A^2 / (K - 1) + B^2 / (n - 1)), n the fewest ``items`` (clusters) of a build
    (None: K - 1, the builds' alone)."""
    k = len(means)
    spread, noise = means.var(ddof=1) / k, float(np.mean(ses**2))
    se = float(np.sqrt(spread + noise))
    item_df = items - 1 if items and items > 1 else 0
    denominator = spread**2 / (k - 1) + (noise**2 / item_df if item_df else 0.0)
    df = (spread + noise) ** 2 / denominator if item_df and denominator > 0 else k - 1
    half = float(stats.t.ppf(0.5 + level / 2, max(df, k - 1))) * se
    mean = float(means.mean())
    return Estimate(mean, mean - half, mean + half, k, a, b, se)


def combined(claim: Claim, found: list[Found | dict[str, Any]], rules: Rules) -> dict[str, Any]:
    """The claim over its builds: the first build without an estimate says why; recorded numbers hold when every
    build's does and fail when every build's fails (the paper's effect inside when every build's is); estimates are
    decided on their mean over the builds."""
    if lacking := next((f for f in found if isinstance(f, dict)), None):
        return lacking
    d, n = claim.digits, len(found)
    means = np.array([f.e.mean for f in found])
    if any(f.recorded for f in found):
        rows = [finish(claim, f) for f in found]
        outcomes = [r["verdict"].split(" (", 1)[0] for r in rows]
        outcome = outcomes[0] if len(set(outcomes)) == 1 else "inconclusive"
        e = Estimate(float(means.mean()), float(means.mean()), float(means.mean()), n)
        row = decided(claim, e, None, f"{fmt(e.mean, d)} over {n} builds (as recorded, no interval)")
        if row["verdict"].startswith("not comparable"):
            return row
        inside = (
            "" if not rows[0]["contains_paper"] else "yes" if all(r["contains_paper"] == "yes" for r in rows) else "no"
        )
        cause = cause_text(claim) if outcome not in SUPPORTED else ""
        each = " / ".join(fmt(m, d) for m in means)
        verdict = f"{outcome} (as recorded, {n} builds)"
        return row | {"verdict": verdict, "cause": cause, "builds": each, "contains_paper": inside}
    ses = np.array([f.e.se for f in found])
    a, b = (float(np.mean([getattr(f.e, x) for f in found])) for x in ("a", "b"))
    items = min(f.e.n for f in found)  # the fewest clusters of a build: the items' degrees of freedom
    e = over_builds(means, ses, rules.level, a, b, items)
    eq = over_builds(means, ses, rules.equivalence_level, items=items) if all(f.eq is not None for f in found) else None
    here = difference_text(e, d) if a == a else pm(e, d, claim.kind != "sign")
    here += (equivalence_text(eq, claim, rules) if eq is not None else "") + f" over {n} builds"
    return decided(claim, e, eq, here) | {"builds": " / ".join(pm(f.e, d, claim.kind != "sign") for f in found)}
