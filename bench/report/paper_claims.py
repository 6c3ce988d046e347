"""The papers' claims as data: the format of ``paper_claims.toml`` (its ``[rules]`` and ``[[claim]]`` tables), read
and checked; :mod:`faithbench.bench.report.claim_verdicts` evaluates them.

A claim compares rows ``(model, method, metric)`` of one suite's run:

- ``difference``: row a minus row b, paired on the samples both scored (per-sample differences averaged per cluster,
  a grid for grid metrics, then a t interval over the clusters), expected ``higher``, ``lower`` or ``on par``;
- ``sign``: one row's mean (per cluster, t interval), expected ``positive`` or ``negative``;
- ``trend``: a sweep of rows, every consecutive step a paired difference, expected ``rising`` or ``falling``;
- ``accuracy``: the held-out accuracies of ``models`` (as run.json records them), in points: a difference of two
  (unpaired interval of two proportions: the run keeps no per-item predictions), or a trend across more;
- ``recorded``: a number run.json records of two models (``key``, e.g. the steps to the best validation score),
  compared as recorded: it has no interval, so the rule reads the point difference (an interval of zero width);
- ``untested``: a claim no run file can decide yet, declared with its ``reason`` (its verdict: not run).

Eligibility is one rule for every model, declared once in the file's ``[rules]``: a claim on a metric listed in
``locality_metrics`` needs every model it names to win at least ``min_cell_wins`` of its grid cells in the locality
check (:mod:`faithbench.models.zoo.locality`); rows compared across models must have been scored on shared items.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithbench.errors import UserError

CLAIMS_FILE = Path(__file__).with_name("paper_claims.toml")
KINDS = {
    "difference": ("higher", "lower", "on par"),
    "sign": ("positive", "negative"),
    "trend": ("rising", "falling"),
    "accuracy": ("higher", "lower", "on par", "rising", "falling"),
    "recorded": ("higher", "lower", "on par"),
    "untested": ("",),
}


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
    models: tuple[str, ...] = ()  # accuracy and recorded claims
    key: str = ""  # a recorded claim's number


def _row(value: Any, where: str) -> Row:
    if not isinstance(value, dict) or set(value) != {"model", "method"}:
        raise UserError(f'{where}: a row is {{ model = "...", method = "..." }}, got {value!r}')
    return Row(model=str(value["model"]), method=str(value["method"]))


def _claim(entry: dict[str, Any], where: str) -> Claim:
    required = {"id", "paper", "source", "finding", "paper_value", "suite", "kind"}
    fields = required | {"metric", "rows", "expect", "digits", "reason", "models", "key"}
    if unknown := set(entry) - fields:
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(fields))}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise UserError(f"{where}: unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    required |= {
        "untested": {"reason"},
        "accuracy": {"models", "expect"},
        "recorded": {"models", "key", "expect"},
    }.get(kind, {"metric", "rows", "expect"})
    if missing := required - set(entry):
        raise UserError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
    if kind == "untested":
        return Claim(**{"metric": "", "rows": (), "expect": "", **entry})
    if kind in ("accuracy", "recorded"):
        models = tuple(str(m) for m in entry["models"])
        pair = entry["expect"] in KINDS["difference"]
        if entry["expect"] not in KINDS[kind] or len(models) < 2 or (pair and len(models) != 2):
            raise UserError(
                f"{where}: a {kind} claim names 2 models and expects higher, lower or on par"
                + (", or more models rising or falling" if kind == "accuracy" else "")
                + f"; got {len(models)} model(s) and {entry['expect']!r}"
            )
        return Claim(**{"metric": "", "rows": (), **entry, "models": models})
    expect = entry["expect"]
    if expect not in KINDS[kind]:
        raise UserError(f"{where}: a {kind} claim expects one of {', '.join(KINDS[kind])}, got {expect!r}")
    rows = tuple(_row(r, where) for r in entry["rows"])
    wanted = {"difference": 2, "sign": 1}.get(kind)
    if (wanted is not None and len(rows) != wanted) or (kind == "trend" and len(rows) < 2):
        raise UserError(f"{where}: a {kind} claim compares {wanted or 'at least 2'} rows, got {len(rows)}")
    if not isinstance(entry.get("digits", 1), int):
        raise UserError(f"{where}: digits is a whole number, got {entry['digits']!r}")
    return Claim(**{**entry, "rows": rows})


def load_claims(path: Path | None = None) -> tuple[Rules, tuple[Claim, ...]]:
    """The rules and claims of a claims file (default: the shipped one, :data:`CLAIMS_FILE`); a malformed one is
    refused with the claim and the key at fault."""
    path = path or CLAIMS_FILE
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"cannot read the claims file {path}: {exc}") from None
    rules = data.get("rules", {})
    metrics = rules.get("locality_metrics", [])
    try:
        parsed = Rules(
            level=float(rules.get("level", 0.95)),
            min_cell_wins=float(rules.get("min_cell_wins", 0.5)),
            locality_metrics=tuple(metrics),
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path} [rules]: {exc}") from None
    if not 0 < parsed.level < 1 or not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise UserError(f"{path} [rules]: level is a probability in (0, 1) and locality_metrics a list of metric names")
    claims = tuple(_claim(c, f"{path} claim {c.get('id', i + 1)!r}") for i, c in enumerate(data.get("claim", [])))
    ids = [c.id for c in claims]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise UserError(f"{path}: claim ids must be unique; repeated: {', '.join(dupes)}")
    return parsed, claims
