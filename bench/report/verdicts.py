"""The papers' claims as data (``paper_claims.toml``), evaluated from finished runs: one row per claim with the paper's
figure, the paired estimate here with its interval, and a verdict from one rule (:func:`verdict`).

A claim compares rows ``(model, method, metric)`` of one suite's run:

- ``difference``: row a minus row b, paired on the samples both scored (per-sample differences averaged per cluster,
  a grid for grid metrics, then a t interval over the clusters), expected ``higher``, ``lower`` or ``on par``;
- ``sign``: one row's mean (per cluster, t interval), expected ``positive`` or ``negative``;
- ``trend``: a sweep of rows, every consecutive step a paired difference, expected ``rising`` or ``falling``;
- ``untested``: a claim no run file can decide yet, declared with its ``reason`` (its verdict: not run).

Eligibility is one rule for every model, declared once in the file's ``[rules]``: a claim on a metric listed in
``locality_metrics`` needs every model it names to win at least ``min_cell_wins`` of its grid cells in the locality
check (:mod:`faithbench.models.zoo.locality`); rows compared across models must have been scored on shared items.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.errors import UserError

CLAIMS_FILE = Path(__file__).with_name("paper_claims.toml")
KINDS = {
    "difference": ("higher", "lower", "on par"),
    "sign": ("positive", "negative"),
    "trend": ("rising", "falling"),
    "untested": ("",),
}
VERDICTS = ("holds", "on par", "fails", "not eligible", "not run")
COLUMNS = ["id", "paper", "source", "finding", "paper_value", "suite", "metric", "expect", "here", "n", "verdict"]


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The rules every claim is held to, declared once."""

    level: float = 0.95  # of every interval
    min_cell_wins: float = 0.5  # the locality check's share of cells a model must win in a localisation claim
    locality_metrics: tuple[str, ...] = ()  # the metrics whose claims the locality check gates


@dataclass(frozen=True, kw_only=True)
class Row:
    model: str
    method: str

    def __str__(self) -> str:
        return f"{self.model} / {self.method}"


@dataclass(frozen=True, kw_only=True)
class Claim:
    id: str
    paper: str
    source: str  # table or figure
    finding: str
    paper_value: str
    suite: str
    metric: str
    kind: str
    rows: tuple[Row, ...]
    expect: str
    digits: int = 1
    reason: str = ""  # an untested claim's


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
    return part.set_index(["cluster_id", "sample_id"])["value"].dropna()


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


# ----------------------------------------------------------------------------------------------- the claims file


def _row(value: Any, where: str) -> Row:
    if not isinstance(value, dict) or set(value) != {"model", "method"}:
        raise UserError(f'{where}: a row is {{ model = "...", method = "..." }}, got {value!r}')
    return Row(model=str(value["model"]), method=str(value["method"]))


def _claim(entry: dict[str, Any], where: str) -> Claim:
    required = {"id", "paper", "source", "finding", "paper_value", "suite", "kind"}
    fields = required | {"metric", "rows", "expect", "digits", "reason"}
    if unknown := set(entry) - fields:
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(fields))}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise UserError(f"{where}: unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    required |= {"reason"} if kind == "untested" else {"metric", "rows", "expect"}
    if missing := required - set(entry):
        raise UserError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
    if kind == "untested":
        return Claim(**{"metric": "", "rows": (), "expect": "", **entry})
    expect = entry["expect"]
    if expect not in KINDS[kind]:
        raise UserError(f"{where}: a {kind} claim expects one of {', '.join(KINDS[kind])}, got {expect!r}")
    rows = tuple(_row(r, where) for r in entry["rows"])
    wanted = {"difference": 2, "sign": 1}.get(kind)
    if (wanted is not None and len(rows) != wanted) or (kind == "trend" and len(rows) < 2):
        raise UserError(f"{where}: a {kind} claim compares {wanted or 'at least 2'} rows, got {len(rows)}")
    return Claim(**{**entry, "rows": rows, "digits": int(entry.get("digits", 1))})


def load_claims(path: Path | None = None) -> tuple[Rules, tuple[Claim, ...]]:
    """The rules and claims of a claims file (default: the shipped one, :data:`CLAIMS_FILE`); a malformed one is
    refused with the claim and the key at fault."""
    path = path or CLAIMS_FILE
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"cannot read the claims file {path}: {exc}") from None
    rules = data.get("rules", {})
    try:
        parsed = Rules(
            level=float(rules.get("level", 0.95)),
            min_cell_wins=float(rules.get("min_cell_wins", 0.5)),
            locality_metrics=tuple(rules.get("locality_metrics", ())),
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path} [rules]: {exc}") from None
    claims = tuple(_claim(c, f"{path} claim {c.get('id', i + 1)!r}") for i, c in enumerate(data.get("claim", [])))
    ids = [c.id for c in claims]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise UserError(f"{path}: claim ids must be unique; repeated: {', '.join(dupes)}")
    return parsed, claims


# ----------------------------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class RunData:
    """What the claims read from one finished run: its per-sample scores (first runs, undefined samples NaN) and
    the recorded params of each (model, method, metric) row."""

    suite: str
    samples: pd.DataFrame
    params: Mapping[tuple[str, str, str], dict[str, Any]]


def run_data(suite: str, results: pd.DataFrame, samples: pd.DataFrame) -> RunData:
    first = results[results["rerun_of"].isna()] if "rerun_of" in results else results
    params = {
        (m, j, k): json.loads(p) if isinstance(p, str) and p else {}
        for m, j, k, p in zip(first["model"], first["method"], first["metric"], first["params"], strict=True)
    }
    if "rerun_of" in samples:
        samples = samples[samples["rerun_of"].isna()]
    return RunData(suite, samples, params)


def _unshared(claim: Claim, run: RunData) -> str | None:
    """Why rows of different models cannot be paired (their items were chosen per model), or None."""
    if len({r.model for r in claim.rows}) < 2:
        return None
    for row in claim.rows:
        p = run.params.get((row.model, row.method, claim.metric), {})
        if not str(p.get("pairing", "shared")).startswith("shared") or p.get("sequences_from") == "per-model":
            return f"{row.model}'s items were chosen per model, not shared"
    return None


def _ineligible(claim: Claim, rules: Rules, locality: Mapping[str, float]) -> str | None:
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


def _difference_text(e: Estimate, digits: int) -> str:
    return (
        f"{_fmt(e.a, digits)} vs {_fmt(e.b, digits)}: "
        f"{_fmt(e.mean, digits, True)} ± {_fmt((e.high - e.low) / 2, digits)}"
    )


def evaluate_claim(claim: Claim, rules: Rules, run: RunData | None, locality: Mapping[str, float]) -> dict[str, Any]:
    """One claim's row: the estimate here (``here``, ``n`` clusters) and its verdict."""
    out = {c: getattr(claim, c) for c in COLUMNS if hasattr(claim, c)} | {"here": "", "n": 0}
    if claim.kind == "untested":
        return out | {"verdict": f"not run ({claim.reason})"}
    if run is None:
        return out | {"verdict": f"not run (no {claim.suite} run given)"}
    missing = [str(r) for r in claim.rows if (r.model, r.method, claim.metric) not in run.params]
    if missing:
        return out | {"verdict": f"not run ({', '.join(missing)} not in the {claim.suite} run)"}
    why = _ineligible(claim, rules, locality) or _unshared(claim, run)
    if why:
        return out | {"verdict": f"not eligible ({why})"}
    d = claim.digits
    if claim.kind == "sign":
        e = one_sample(run.samples, claim.rows[0], claim.metric, rules.level)
        if e is None:
            return out | {"verdict": "not eligible (fewer than 2 scored samples)"}
        here = f"{_fmt(e.mean, d)} ± {_fmt((e.high - e.low) / 2, d)}"
        return out | {"here": here, "n": e.n, "verdict": verdict(claim.expect, e.low, e.high)}
    pairs = list(zip(claim.rows[1:], claim.rows[:-1], strict=True)) if claim.kind == "trend" else [claim.rows]
    estimates = [paired_difference(run.samples, a, b, claim.metric, rules.level) for a, b in pairs]
    if any(e is None for e in estimates):
        return out | {"verdict": "not eligible (fewer than 2 paired samples)"}
    if claim.kind == "difference":
        (e,) = estimates
        return out | {"here": _difference_text(e, d), "n": e.n, "verdict": verdict(claim.expect, e.low, e.high)}
    step = "higher" if claim.expect == "rising" else "lower"
    levels = " → ".join(_fmt(v, d) for v in [estimates[0].b, *(e.a for e in estimates)])
    steps = ", ".join(f"{_fmt(e.mean, d, True)} ± {_fmt((e.high - e.low) / 2, d)}" for e in estimates)
    return out | {
        "here": f"{levels}; steps {steps}",
        "n": min(e.n for e in estimates),
        "verdict": combined([verdict(step, e.low, e.high) for e in estimates]),
    }


def evaluate_claims(
    claims: tuple[Claim, ...], rules: Rules, runs: Mapping[str, RunData], locality: Mapping[str, float]
) -> pd.DataFrame:
    """Every claim's row (:data:`COLUMNS`), from the runs by suite name and the models' locality (cell wins)."""
    rows = [evaluate_claim(c, rules, runs.get(c.suite), locality) for c in claims]
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict_table(table: pd.DataFrame) -> str:
    """The claims as a Markdown table (the results page's is this, generated)."""
    head = (
        "| paper | claim | paper's figure | here (paired ± 95 % interval) | n | verdict |\n"
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
    return evaluate_claims(mine, rules, {suite: run_data(suite, results, samples)}, read_locality(run_dir))
