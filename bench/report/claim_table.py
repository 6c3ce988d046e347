"""The claims' table as text: the outcomes counted per block and the Markdown table of the results page (rows
from :func:`faithbench.bench.report.claim_verdicts.evaluate_claims`)."""

from __future__ import annotations

import pandas as pd

from faithbench.bench.report.claim_rule import SUPPORTED

BLOCKS = {"paper": "the papers' claims", "extension": "extensions"}  # in the table's order
OUTCOMES = (  # in the totals' order
    *("holds", "fails", "inconclusive", "equivalent", "not equivalent"),
    *("not comparable", "not eligible", "not run"),
)


def outcome_of(verdict: str) -> str:
    """A verdict's outcome without its reason: ``holds (as recorded)`` -> ``holds``."""
    return verdict.split(" (", 1)[0]


def summary(table: pd.DataFrame) -> dict[str, str]:
    """One line per block present (:data:`BLOCKS`): the outcomes counted, and in how many of the claims with a
    paper effect the outcome supports the claim and the interval contains the paper's effect."""
    lines = {}
    for block, title in BLOCKS.items():
        part = table[table["block"] == block]
        if part.empty:
            continue
        counts = part["verdict"].map(outcome_of).value_counts().reindex(OUTCOMES).dropna().astype(int)
        sized = part[(part["contains_paper"] != "") & ~part["verdict"].str.startswith("not comparable")]
        both = int((sized["verdict"].map(outcome_of).isin(SUPPORTED) & (sized["contains_paper"] == "yes")).sum())
        size = (
            f"; direction and size reproduced in {both} of the {len(sized)} with a paper effect" if len(sized) else ""
        )
        lines[block] = f"{title} ({len(part)}): " + ", ".join(f"{n} {v}" for v, n in counts.items()) + size
    return lines


def _ratio_text(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio == ratio else "-"


def verdict_table(table: pd.DataFrame) -> str:
    """The claims as Markdown, the papers' claims and the extensions each with its totals (the results page's
    table is this, generated)."""
    head = (
        "| paper | claim | paper's figure | paper's effect | here (± 95 % interval) | n | per build | here / paper | "
        "paper's effect inside | verdict | cause |\n"
        "| --- | --- | --- | ---: | --- | ---: | --- | ---: | --- | --- | --- |"
    )
    parts = []
    for block, line in summary(table).items():
        rows = table[table["block"] == block]
        lines = [
            f"| {r.paper} {r.source} | {r.finding} | {r.paper_value} | {r.paper_effect or '-'} | {r.here or '-'} | "
            f"{r.n or '-'} | {r.builds or '-'} | {_ratio_text(r.ratio)} | {r.contains_paper or '-'} | {r.verdict} | "
            f"{r.cause or '-'} |"
            for r in rows.itertuples()
        ]
        title, counts = line.split(": ", 1)
        parts.append("\n".join([f"**{title[0].upper()}{title[1:]}**: {counts}.", "", head, *lines]))
    return "\n\n".join(parts) + "\n"
