"""The verdict rule of the papers' claims and the estimates it reads: paired differences, one-sample means and
accuracy differences with their intervals, and how an estimate stands against the paper's own effect.

Four outcomes and a size (docs: Results against the papers, *The verdict rule*):

- a **direction** (``higher`` / ``positive`` / ``rising`` or their opposites) **holds** when the interval at the
  rules' ``level`` excludes 0 on the claimed side, **fails** when it excludes 0 on the other side, and is
  **inconclusive** otherwise;
- an **equivalence** within a declared ``margin`` (two one-sided tests: the interval at ``equivalence_level``, 90 %
  for TOST at 5 %) is **equivalent** when that interval lies inside ``(-margin, +margin)``, **not equivalent** when
  it lies wholly outside, and **inconclusive** otherwise;
- beside either, the paper's effect in the same unit: the ratio of the estimate here to it and whether the interval
  contains it (a range of the paper's figures is contained when the two overlap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.bench.report.paper_claims import Claim, Row, Rules

UP = ("higher", "positive", "rising")
# the outcomes that support the claim; every other decided outcome carries the claim's declared cause
SUPPORTED = ("holds", "equivalent")
DECIDED = (*SUPPORTED, "fails", "inconclusive", "not equivalent")  # the outcomes of the rule itself


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` clusters with its interval and standard error; for a difference also the two rows' means."""

    mean: float
    low: float
    high: float
    n: int
    a: float = float("nan")
    b: float = float("nan")
    se: float = 0.0  # the standard error behind the interval (0: a number as recorded)


@dataclass(frozen=True)
class Found:
    """A claim's estimate before its outcome: the interval at the rules' level, an equivalence's interval at the
    equivalence level, the text of the table's ``here``; ``recorded``: a number as recorded, without an interval
    (``ratio``: one that supports the claim above 1, a speed-up or a cost ratio; else a difference)."""

    e: Estimate
    eq: Estimate | None
    here: str
    recorded: bool = False
    ratio: bool = False


def directional(expect: str, low: float, high: float) -> str:
    """A claimed direction against an interval: holds / fails / inconclusive (an interval touching 0 contains it)."""
    up = expect in UP
    if (low > 0) if up else (high < 0):
        return "holds"
    if (high < 0) if up else (low > 0):
        return "fails"
    return "inconclusive"


def equivalence(margin: float, low: float, high: float) -> str:
    """Two one-sided tests of ``|effect| < margin`` from the interval at the equivalence level: equivalent /
    not equivalent / inconclusive."""
    if -margin < low and high < margin:
        return "equivalent"
    if low > margin or high < -margin:
        return "not equivalent"
    return "inconclusive"


def decide(expect: str, low: float, high: float, margin: float | None = None) -> str:
    """The outcome of one claim from its interval (an equivalence's at the equivalence level)."""
    if expect == "equivalent":
        if margin is None:
            raise ValueError("an equivalence claim needs its margin")
        return equivalence(margin, low, high)
    return directional(expect, low, high)


def against_paper(e: Estimate, paper: tuple[float, float] | None) -> tuple[float, str]:
    """The estimate here over the paper's effect (a range's midpoint; NaN without a paper figure or at 0) and
    whether the interval contains the paper's effect: ``yes`` / ``no`` / ``""`` (no paper figure)."""
    if paper is None:
        return float("nan"), ""
    lo, hi = paper
    mid = (lo + hi) / 2
    ratio = e.mean / mid if mid != 0 else float("nan")
    return ratio, "yes" if e.low <= hi and lo <= e.high else "no"


# ----------------------------------------------------------------------------------------------- a decided row


def fmt(value: float, digits: int, sign: bool = False) -> str:
    return f"{value:{'+' if sign else ''}.{digits}f}"


def pm(e: Estimate, digits: int, sign: bool = False) -> str:
    """``mean ± half-width``."""
    return f"{fmt(e.mean, digits, sign)} ± {fmt((e.high - e.low) / 2, digits)}"


def difference_text(e: Estimate, digits: int) -> str:
    return f"{fmt(e.a, digits)} vs {fmt(e.b, digits)}: {pm(e, digits, True)}"


def equivalence_text(e: Estimate, claim: Claim, rules: Rules) -> str:
    d = claim.digits
    level = f"{100 * rules.equivalence_level:g} %"
    return f"; {level} [{fmt(e.low, d, True)}, {fmt(e.high, d, True)}] vs ±{fmt(claim.margin or 0, d)}"


def effect_text(claim: Claim) -> str:
    if claim.paper_effect is None:
        return ""
    lo, hi = claim.paper_effect
    d = claim.digits
    return fmt(lo, d, True) if lo == hi else f"{fmt(lo, d, True)} to {fmt(hi, d, True)}"


def cause_text(claim: Claim) -> str:
    """The declared cause as the table shows it (``undeclared`` without one)."""
    return f"{claim.cause}: {claim.cause_note}" if claim.cause else "undeclared"


def decided(claim: Claim, e: Estimate, equivalent: Estimate | None, here: str) -> dict[str, Any]:
    """A decided claim's row: the outcome from its interval (an equivalence's from ``equivalent``, the interval at
    the equivalence level), the paper's effect against the 95 % interval, the declared cause where it does not hold,
    or not comparable where a definition decides it (the estimate still shown)."""
    low, high = (equivalent.low, equivalent.high) if equivalent is not None else (e.low, e.high)
    outcome = decide(claim.expect, low, high, claim.margin)
    ratio, contains = against_paper(e, claim.paper_effect)
    if claim.not_comparable:
        outcome = f"not comparable ({claim.not_comparable})"
    cause = cause_text(claim) if outcome in DECIDED and outcome not in SUPPORTED else ""
    return {"here": here, "n": e.n, "ratio": ratio, "contains_paper": contains, "verdict": outcome, "cause": cause}


# ----------------------------------------------------------------------------------------------- the estimates


def _interval(values: np.ndarray, level: float) -> tuple[float, float, float, float]:
    n = len(values)
    mean = float(values.mean())
    se = float(values.std(ddof=1) / np.sqrt(n))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * se)
    return mean, mean - half, mean + half, se


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
    mean, low, high, se = _interval(diffs, level)
    a, b = (float(per_cluster.iloc[:, k].mean()) for k in (0, 1))
    return Estimate(mean, low, high, len(diffs), a, b, se)


def one_sample(samples: pd.DataFrame, a: Row, metric: str, level: float) -> Estimate | None:
    """The row's mean over its clusters with a t interval (None: fewer than 2 clusters)."""
    per_cluster = _values(samples, a, metric).groupby(level="cluster_id").mean().to_numpy()
    if len(per_cluster) < 2:
        return None
    mean, low, high, se = _interval(per_cluster, level)
    return Estimate(mean, low, high, len(per_cluster), se=se)


def accuracy_difference(a: tuple[float, int], b: tuple[float, int], level: float) -> Estimate:
    """a - b of two held-out accuracies in points, with the unpaired (Wald) interval of two proportions."""
    (pa, na), (pb, nb) = a, b
    se = float(np.sqrt(pa * (1 - pa) / na + pb * (1 - pb) / nb))
    half = float(stats.norm.ppf(0.5 + level / 2)) * se
    d = pa - pb
    return Estimate(100 * d, 100 * (d - half), 100 * (d + half), min(na, nb), 100 * pa, 100 * pb, 100 * se)


def paired_accuracy_difference(a: np.ndarray, b: np.ndarray, level: float) -> Estimate:
    """a - b of two models' held-out accuracies in points on the same items (``a``, ``b``: per-item correct, 0/1),
    with the paired Wald interval of two correlated proportions from McNemar's discordant pairs, Agresti and Min's
    (2005) way: half an item added to each of the four cells, so that two models with no discordant item still get
    an interval of some width (Var = (p10 + p01 - (p10 - p01)^2) / (n + 2), p10 = (n10 + 1/2) / (n + 2))."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"paired accuracies need per-item results of equal length, got {a.shape} and {b.shape}")
    n = len(a)
    n10, n01 = int((a & ~b).sum()), int((~a & b).sum())
    d = (n10 - n01) / n
    p10, p01 = (n10 + 0.5) / (n + 2), (n01 + 0.5) / (n + 2)
    se = float(np.sqrt((p10 + p01 - (p10 - p01) ** 2) / (n + 2)))
    half = float(stats.norm.ppf(0.5 + level / 2)) * se
    return Estimate(100 * d, 100 * (d - half), 100 * (d + half), n, 100 * a.mean(), 100 * b.mean(), 100 * se)
