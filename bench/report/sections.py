"""The report's sections after the leaderboard (skill, reliability, rerun and metric agreement, cost, identical
maps), each one title, one note and one table, so the text, Markdown and HTML reports say the same."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from faithbench.bench.report.agreement import AGREEMENT_NOTE, agreement_text
from faithbench.bench.report.card import card_section_note, card_text
from faithbench.bench.report.claim_verdicts import LOCALITY_FILE, run_claims
from faithbench.bench.report.cost import explanation_cost
from faithbench.bench.report.formats import WIDTH, to_markdown, to_text
from faithbench.bench.report.statistics_section import (
    SKILL_NOTE,
    LeaderboardStats,
    read_samples,
    reliability_text,
    skill_table,
)
from faithbench.bench.report.tables import row_order, sort_rows
from faithbench.bench.store import identity
from faithbench.bench.store.run_catalog import current


@dataclass
class Section:
    title: str  # "Skill over the controls"
    note: str
    table: pd.DataFrame | None = None
    bullets: list[str] = field(default_factory=list)  # a closing list (its lead line first)

    @property
    def anchor(self) -> str:
        return self.title.lower().replace(" ", "-")

    def text(self) -> str:
        blocks = [f"{self.title[0].lower()}{self.title[1:]}\n{textwrap.fill(self.note, WIDTH)}"]
        if self.table is not None:
            keys = sum(c in ("model", "method", "seed") for c in self.table.columns)
            blocks.append(to_text(self.table, width=WIDTH, keys=keys))
        if self.bullets:
            lines = [textwrap.fill(b, WIDTH, initial_indent="  ", subsequent_indent="    ") for b in self.bullets[1:]]
            blocks.append("\n".join([textwrap.fill(self.bullets[0], WIDTH), *lines]))
        return "\n\n".join(blocks)

    def markdown(self) -> str:
        blocks = [f"### {self.title}\n\n{self.note}"]
        if self.table is not None:
            blocks.append(to_markdown(self.table).rstrip("\n"))
        if self.bullets:
            blocks.append("\n".join([self.bullets[0], *(f"- {b}" for b in self.bullets[1:])]))
        return "\n\n".join(blocks)


def statistics_sections(stats: LeaderboardStats, results: pd.DataFrame) -> list[Section]:
    """Skill over the controls, split-half reliability, rerun agreement and metric agreement (those the run has)."""
    out = []
    skill = skill_table(stats)
    if not skill.empty:
        out.append(Section("Skill over the controls", SKILL_NOTE, sort_rows(skill, row_order(results))))
    reliability = reliability_text(stats)
    if not reliability.empty:
        note = (
            "Split-half reliability of each metric's method ranking (Spearman correlation of the methods' means on "
            "two random halves of the samples, mean over 100 splits, Spearman-Brown corrected; 1: the ranking "
            "replicates, 0: it is noise; n/a with fewer than 3 methods or 4 common samples)."
        )
        out.append(Section("Metric reliability", note, reliability))
    agreement = agreement_text(stats.reliability)
    if not agreement.empty:
        out.append(Section("Agreement of the samples: alpha / MAD ratio", AGREEMENT_NOTE, agreement))
    if not stats.reruns.empty:
        wide = stats.reruns.assign(rho=stats.reruns["rerun_rho"].map(lambda v: "n/a" if v != v else f"{v:.2f}"))
        wide = wide.pivot_table(index=["model", "method", "seed"], columns="metric", values="rho", aggfunc="first")
        wide = wide.reindex(columns=list(dict.fromkeys(stats.reruns["metric"]))).fillna("–")
        wide.columns.name = None
        note = (
            "Seeded methods run again with another seed (suite key `rerun_seeds`): Spearman correlation of the "
            "per-sample scores of the two runs (1: the metric ranks the samples the same whatever the seed)."
        )
        out.append(Section("Rerun agreement", note, wide.reset_index()))
    if not stats.agreement.empty:
        mean = stats.agreement.groupby(["metric_a", "metric_b"], sort=False)["tau"].mean().reset_index()
        mean["tau"] = mean["tau"].map(lambda v: f"{v:+.2f}")
        note = (
            "Kendall's tau-b between the method rankings of two metrics on the same model, mean over the models "
            "(+1: same order, -1: reversed; each metric's direction applied)."
        )
        out.append(Section("Metric agreement", note, mean))
    return out


def cost_section(results: pd.DataFrame) -> Section | None:
    """Seconds per explained input of every (model, method) and the ratio to the model's native W(x)x."""
    table = explanation_cost(results)
    if table.empty:
        return None
    shown = table.assign(
        s_per_input=table["s_per_input"].map(lambda v: f"{v:.4f}"),
        x_native=table["x_native"].map(lambda v: "–" if v != v else f"{v:.1f}x"),
    )
    note = (
        "Seconds per explained input (the per-sample explanations of each unit, on this run's device and batch "
        "size), and the ratio to the native W(x)x of the same model."
    )
    return Section("Cost of an explanation", note, shown)


def identity_section(run_dir: Path) -> Section | None:
    """The run's method pairs with identical maps, labelled, and the known identities (None before the check)."""
    record = identity.read(run_dir)
    if record is None:
        return None
    pairs = record["pairs"]
    table = None
    note = f"Flagged when {record['rule']}."
    if pairs:
        table = pd.DataFrame(
            {
                "model": [p["model"] for p in pairs],
                "methods": [" = ".join(p["methods"]) for p in pairs],
                "max rel. diff": [f"{p['max_rel_diff']:.1e}" for p in pairs],
                "verdict": [identity.verdict(p) for p in pairs],
            }
        )
    else:
        note += " No two methods of a model gave identical maps."
    lead = "Known identities (mathematics, not defects; a flagged pair they explain is expected):"
    return Section(
        "Methods with identical maps",
        note,
        table,
        [lead, *current().identities],  # the identities that are mathematics, not defects
    )


def report_sections(
    stats: LeaderboardStats, results: pd.DataFrame, run_dir: Path, card: pd.DataFrame | None = None
) -> list[Section]:
    """Every section after the leaderboard, in the report's order (the metrics' report card after their statistics)."""
    sections = statistics_sections(stats, results)
    if card is not None and not card.empty:
        sections.append(Section("Report card of the metrics", card_section_note(), card_text(card)))
    extra = (claims_section(results, run_dir), cost_section(results), identity_section(run_dir))
    return sections + [s for s in extra if s is not None]


def claims_section(results: pd.DataFrame, run_dir: Path) -> Section | None:
    """The papers' claims this run's suite decides (:mod:`faithbench.bench.report.claim_verdicts`), or None."""
    if "suite" not in results or results.empty:
        return None
    table = run_claims(run_dir, str(results["suite"].iloc[0]), results, read_samples)
    if table.empty:
        return None
    note = (
        "The seed papers' claims this suite decides, paired on the samples both rows scored (95 % t interval over the "
        "clusters), each verdict by the one rule of the docs' results page (holds / fails / inconclusive for a "
        "direction, equivalent / not equivalent / inconclusive within a declared margin; not comparable / not "
        "eligible / not run), beside the paper's effect. Localisation claims need each model's locality check, which "
        f"`bench verdicts` measures and records in {LOCALITY_FILE} beside the results; until then they read not "
        "eligible."
    )
    return Section(
        "Paper claims",
        note,
        table[["id", "paper_effect", "here", "n", "contains_paper", "verdict"]].rename(
            columns={"paper_effect": "paper", "contains_paper": "inside"}
        ),
    )
