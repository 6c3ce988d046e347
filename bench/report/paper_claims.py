"""The papers' claims as data: the format of ``paper_claims.toml`` (its ``[rules]`` and ``[[claim]]`` tables), read
and checked; :mod:`faithbench.bench.report.claim_verdicts` evaluates them by the rule of
:mod:`faithbench.bench.report.claim_rule`.

A claim compares rows ``(model, method, metric)`` of one suite's run:

- ``difference``: row a minus row b, paired on the samples both scored (per-sample differences averaged per cluster,
  a grid for grid metrics, then a t interval over the clusters), expected ``higher``, ``lower`` or ``equivalent``
  (within a declared ``margin`` in the metric's unit, with its ``margin_reason``);
- ``sign``: one row's mean (per cluster, t interval), expected ``positive`` or ``negative``;
- ``trend``: a sweep of rows, expected ``rising`` or ``falling``, decided on the endpoint (last row minus first,
  paired); the levels between are shown, not tested;
- ``accuracy``: the held-out accuracies of ``models`` (as run.json records them), in points: a difference of two
  (paired on the test items where both records hold per-item results, else the unpaired interval of two
  proportions), or a trend across more (decided on the endpoint);
- ``recorded``: a number run.json records of two models (``key``, e.g. the steps to the best validation score),
  compared as recorded: it has no interval, so the rule reads the point difference (an interval of zero width);
- ``speedup``: how many times fewer training epochs the first of two ``models`` needs to reach the second's best
  held-out accuracy than the second needed (their recorded accuracy by epoch), as recorded, expected ``higher``
  (than 1);
- ``cost``: how many times fewer explanation seconds per explained input row a's unit spent than row b's on the
  inputs ``metric`` explains (the results' explain time over n), as recorded, expected ``lower`` (a cheaper);
- ``untested``: a claim no run file can decide yet, declared with its ``reason`` (its verdict: not run).

Beside the comparison a claim declares what the table shows about it: ``paper_effect``, the paper's own effect in
the same unit as the estimate here (a number, or ``[low, high]`` for a range of the paper's figures);
``extension = true`` for a comparison the seed papers do not make (its own block and totals); ``not_comparable``,
the reason a comparison is decided by a definition rather than by the models (its verdict: not comparable); and
``cause`` (one of :data:`CAUSES`) with a one-line ``cause_note``: why the claim does not hold, shown whenever it
does not.

Eligibility is one rule for every model, declared once in the file's ``[rules]``: a claim on a metric listed in
``locality_metrics`` needs every model it names to win at least ``min_cell_wins`` of its grid cells in the locality
check (:mod:`faithbench.models.zoo.locality`); a model that predicts fewer than ``min_predicted_classes`` classes on
its held-out items (as its build records) has not learned the task, and no claim reads its explanations; rows
compared across models must have been scored on shared items.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithbench.errors import UserError

CLAIMS_FILE = Path(__file__).with_name("paper_claims.toml")
KINDS = {
    "difference": ("higher", "lower", "equivalent"),
    "sign": ("positive", "negative"),
    "trend": ("rising", "falling"),
    "accuracy": ("higher", "lower", "equivalent", "rising", "falling"),
    "recorded": ("higher", "lower"),
    "speedup": ("higher",),
    "cost": ("lower",),
    "untested": ("",),
}
MODEL_KINDS = ("accuracy", "recorded", "speedup")  # the kinds decided from run.json's record of the models
# why a claim does not hold, declared per claim: the models are toys beside the papers'; the protocol here differs
# from the paper's in a stated way; a definition decides the comparison; the rule (interval or margin) cannot
# decide it at this n; or the finding itself does not reproduce
CAUSES = ("toy scale", "protocol difference", "definition", "rule", "substantive")


@dataclass(frozen=True, kw_only=True)
class Rules:
    """The rules every claim is held to, declared once."""

    level: float = 0.95  # of every directional interval
    equivalence_level: float = 0.90  # of an equivalence's interval (two one-sided tests at 5 %)
    min_cell_wins: float = 0.5  # the locality check's share of cells a model must win in a localisation claim
    locality_metrics: tuple[str, ...] = ()  # the metrics whose claims the locality check gates
    min_predicted_classes: int = (
        2  # held out: a model predicting one class has not learned; its explanations say nothing
    )


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
    margin: float | None = None  # an equivalence's, in the metric's unit
    margin_reason: str = ""
    paper_effect: tuple[float, float] | None = None  # the paper's effect in the estimate's unit (a point: lo == hi)
    extension: bool = False  # a comparison the seed papers do not make
    not_comparable: str = ""  # why a definition, not the models, would decide it
    cause: str = ""  # why it does not hold: one of CAUSES ...
    cause_note: str = ""  # ... in one line


def _row(value: Any, where: str) -> Row:
    if not isinstance(value, dict) or set(value) != {"model", "method"}:
        raise UserError(f'{where}: a row is {{ model = "...", method = "..." }}, got {value!r}')
    return Row(model=str(value["model"]), method=str(value["method"]))


DECLARED = ("margin", "margin_reason", "paper_effect", "extension", "not_comparable", "cause", "cause_note")


def _declared(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """The claim's declarations beside its comparison (margin, paper effect, labels, cause), checked."""
    out: dict[str, Any] = {}
    equivalent = entry.get("expect") == "equivalent"
    margin = entry.get("margin")
    if equivalent != (margin is not None) or equivalent != bool(entry.get("margin_reason")):
        raise UserError(
            f'{where}: an equivalence (expect = "equivalent") declares its margin and margin_reason, and only an '
            f"equivalence does; got expect {entry.get('expect')!r}, margin {margin!r}"
        )
    if margin is not None:
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not margin > 0:
            raise UserError(f"{where}: margin is a positive number in the metric's unit, got {margin!r}")
        out |= {"margin": float(margin), "margin_reason": str(entry["margin_reason"])}
    if "paper_effect" in entry:
        effect = entry["paper_effect"]
        effect = [effect, effect] if isinstance(effect, int | float) and not isinstance(effect, bool) else effect
        if not (
            isinstance(effect, list)
            and len(effect) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in effect)
            and effect[0] <= effect[1]
        ):
            raise UserError(f"{where}: paper_effect is a number or [low, high] with low <= high, got {effect!r}")
        out["paper_effect"] = (float(effect[0]), float(effect[1]))
    if not isinstance(entry.get("extension", False), bool):
        raise UserError(f"{where}: extension is true or false, got {entry['extension']!r}")
    cause, note = entry.get("cause", ""), entry.get("cause_note", "")
    if bool(cause) != bool(note) or (cause and cause not in CAUSES):
        raise UserError(
            f"{where}: a cause is one of {', '.join(CAUSES)} with a one-line cause_note; got {cause!r}, {note!r}"
        )
    if "\n" in str(note) or "\n" in str(entry.get("not_comparable", "")):
        raise UserError(f"{where}: cause_note and not_comparable are one line each")
    return out


def _claim(entry: dict[str, Any], where: str) -> Claim:
    required = {"id", "paper", "source", "finding", "paper_value", "suite", "kind"}
    fields = required | {"metric", "rows", "expect", "digits", "reason", "models", "key", *DECLARED}
    if unknown := set(entry) - fields:
        raise UserError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(fields))}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise UserError(f"{where}: unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    if entry.get("expect") == "on par":
        raise UserError(
            f"{where}: 'on par' is no claim the rule can decide: declare expect = \"equivalent\" with a margin in the "
            "metric's unit and its margin_reason, or a direction"
        )
    required |= {
        "untested": {"reason"},
        "accuracy": {"models", "expect"},
        "recorded": {"models", "key", "expect"},
        "speedup": {"models", "expect"},
    }.get(kind, {"metric", "rows", "expect"})
    if missing := required - set(entry):
        raise UserError(f"{where}: missing key(s) {', '.join(sorted(missing))}")
    entry = {**entry, **_declared(entry, where)}
    if kind == "untested":
        return Claim(**{"metric": "", "rows": (), "expect": "", **entry})
    if kind in MODEL_KINDS:
        models = tuple(str(m) for m in entry["models"])
        pair = entry["expect"] in KINDS["difference"]
        if entry["expect"] not in KINDS[kind] or len(models) < 2 or (pair and len(models) != 2):
            raise UserError(
                f"{where}: a {kind} claim names 2 models and expects {' or '.join(KINDS[kind][:3])}"
                + (", or more models rising or falling" if kind == "accuracy" else "")
                + f"; got {len(models)} model(s) and {entry['expect']!r}"
            )
        return Claim(**{"metric": "", "rows": (), **entry, "models": models})
    expect = entry["expect"]
    if expect not in KINDS[kind]:
        raise UserError(f"{where}: a {kind} claim expects one of {', '.join(KINDS[kind])}, got {expect!r}")
    rows = tuple(_row(r, where) for r in entry["rows"])
    wanted = {"difference": 2, "cost": 2, "sign": 1}.get(kind)
    if (wanted is not None and len(rows) != wanted) or (kind == "trend" and len(rows) < 2):
        raise UserError(f"{where}: a {kind} claim compares {wanted or 'at least 2'} rows, got {len(rows)}")
    if not isinstance(entry.get("digits", 1), int):
        raise UserError(f"{where}: digits is a whole number, got {entry['digits']!r}")
    return Claim(**{**entry, "rows": rows})


def _expanded(entry: dict[str, Any], where: str) -> list[tuple[dict[str, Any], str]]:
    """A claim with ``for_methods`` as one claim per method: ``{method}`` in its id, finding, paper_value and rows'
    methods names each (one comparison declared once for every post-hoc method of a figure)."""
    methods = entry.get("for_methods")
    if methods is None:
        return [(entry, where)]
    if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
        raise UserError(f"{where}: for_methods is a list of method names, got {methods!r}")
    if "{method}" not in str(entry.get("id", "")):
        raise UserError(f"{where}: a claim with for_methods has {{method}} in its id, so each claim's id is its own")
    rest = {k: v for k, v in entry.items() if k != "for_methods"}
    out = []
    for m in methods:
        named = {k: v.replace("{method}", m) if isinstance(v, str) else v for k, v in rest.items()}
        if isinstance(rest.get("rows"), list):
            named["rows"] = [
                {k: v.replace("{method}", m) if isinstance(v, str) else v for k, v in r.items()}
                if isinstance(r, dict) else r
                for r in rest["rows"]
            ]  # fmt: skip
        out.append((named, where))
    return out


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
            equivalence_level=float(rules.get("equivalence_level", 0.90)),
            min_cell_wins=float(rules.get("min_cell_wins", 0.5)),
            locality_metrics=tuple(metrics),
            min_predicted_classes=int(rules.get("min_predicted_classes", 2)),
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path} [rules]: {exc}") from None
    levels_ok = 0 < parsed.level < 1 and 0 < parsed.equivalence_level < 1 and parsed.min_predicted_classes >= 1
    if not levels_ok or not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise UserError(
            f"{path} [rules]: level and equivalence_level are probabilities in (0, 1), min_predicted_classes a "
            "count of at least 1 and locality_metrics a list of metric names"
        )
    declared = enumerate(data.get("claim", []))
    entries = [e for i, c in declared for e in _expanded(c, f"{path} claim {c.get('id', i + 1)!r}")]
    claims = tuple(_claim(c, f"{path} claim {c['id']!r}" if "id" in c else where) for c, where in entries)
    ids = [c.id for c in claims]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise UserError(f"{path}: claim ids must be unique; repeated: {', '.join(dupes)}")
    return parsed, claims
