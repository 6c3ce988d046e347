"""Leaderboards (terminal, Markdown, HTML, LaTeX) and plots from a run's CSV files."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from faithbench.bench.report.cost import cost_section
from faithbench.bench.report.figures import write_plots
from faithbench.bench.report.stats import (
    SKILL_NOTE,
    LeaderboardStats,
    leaderboard_stats,
    reliability_text,
    skill_table,
    write_statistics,
)
from faithbench.bench.run import identity
from faithbench.bench.run.results import first_runs, read_results
from faithbench.metrics.registry import METRICS


def _cell(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    half = (high - low) / 2 if math.isfinite(high) and math.isfinite(low) else 0.0
    return f"{mean:.2f} ± {half:.2f}"


def leaderboard(results: pd.DataFrame, stats: LeaderboardStats | None = None) -> pd.DataFrame:
    """One row per (model, method), one column per metric: ``mean ± 95% CI half-width``.

    Column names carry the direction (↑ higher is better, ↓ lower is better) and unit; with ``stats``,
    the best and tied-best cells of each model and metric carry their marks and P(rank 1).
    """

    results = first_runs(results)  # reruns: statistics only
    metrics = [m for m in METRICS if m in set(results["metric"])]
    metrics += sorted(set(results["metric"]) - set(metrics))
    table = results.assign(
        cell=[
            _cell(m, lo, hi)
            + (f" {stats.suffix(model, method, metric)}" if stats and stats.suffix(model, method, metric) else "")
            for m, lo, hi, model, method, metric in zip(
                results["mean"],
                results["ci_low"],
                results["ci_high"],
                results["model"],
                results["method"],
                results["metric"],
                strict=True,
            )
        ]
    )
    pivot = table.pivot_table(index=["model", "method"], columns="metric", values="cell", aggfunc="first")
    pivot = pivot.reindex(columns=metrics).fillna("–")
    heads = {}
    for m in metrics:
        row = results[results["metric"] == m].iloc[0]
        arrow = "↑" if bool(row["higher_is_better"]) else "↓"
        unit = row.get("unit", "")
        heads[m] = f"{m} {arrow}" + (f" [{unit}]" if isinstance(unit, str) and unit else "")
    return pivot.rename(columns=heads).reset_index()


def to_text(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    widths = [max(len(str(c)), *(len(str(v)) for v in table[c])) for c in cols]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for _, row in table.iterrows():
        lines.append("  ".join(str(row[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))
    return "\n".join(lines)


def to_markdown(table: pd.DataFrame) -> str:
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame) -> str:
    def esc(v: object) -> str:
        s = str(v).replace("_", r"\_").replace("±", r"$\pm$").replace("↑", r"$\uparrow$")
        s = s.replace("★", r"$\star$").replace("≈", r"$\approx$")
        return s.replace("↓", r"$\downarrow$").replace("%", r"\%").replace("–", "--")

    cols = [esc(c) for c in table.columns]
    lines = [r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(results: pd.DataFrame, out: Path, stats: LeaderboardStats | None = None) -> dict[str, Path]:
    """The leaderboard in Markdown, HTML, LaTeX and text, each with the statistics' footnote under it."""
    out.mkdir(parents=True, exist_ok=True)
    table = leaderboard(results, stats)
    notes = stats.footnote() if stats else []
    paths = {
        "markdown": out / "leaderboard.md",
        "html": out / "leaderboard.html",
        "latex": out / "leaderboard.tex",
        "text": out / "leaderboard.txt",
    }
    paths["markdown"].write_text(to_markdown(table) + "".join(f"\n{n}\n" for n in notes))
    paths["html"].write_text(table.to_html(index=False, border=0) + "".join(f"\n<p>{n}</p>" for n in notes))
    latex_notes = "".join(f"\n% {n}\n" for n in notes).replace("★", "star").replace("≈", "approx")
    paths["latex"].write_text(to_latex(table) + latex_notes)
    paths["text"].write_text(to_text(table) + "".join(f"\n\n{n}" for n in notes) + "\n")
    return paths


def identity_section(run_dir: Path, markdown: bool) -> str:
    """The run's method pairs with identical maps, labelled, and the known identities ("" before the check)."""

    record = identity.read(run_dir)
    if record is None:
        return ""
    head = "### Methods with identical maps\n\n" if markdown else "methods with identical maps\n"
    blocks = [f"{head}Flagged when {record['rule']}."]
    if record["pairs"]:
        table = pd.DataFrame(
            {
                "model": [p["model"] for p in record["pairs"]],
                "methods": [" = ".join(p["methods"]) for p in record["pairs"]],
                "max rel. diff": [f"{p['max_rel_diff']:.1e}" for p in record["pairs"]],
                "verdict": [identity.verdict(p) for p in record["pairs"]],
            }
        )
        blocks.append((to_markdown(table) if markdown else to_text(table)).rstrip("\n"))
    else:
        blocks.append("No two methods of a model gave identical maps.")
    bullet = "- " if markdown else "  "
    known = [f"{bullet}{line}" for line in identity.known_identities_text()]
    blocks.append(
        "\n".join(["Known identities (mathematics, not defects; a flagged pair they explain is expected):"] + known)
    )
    return "\n\n".join(blocks)


def statistics_section(stats: LeaderboardStats, markdown: bool) -> str:
    """Split-half reliability per model and metric, and how well the metrics agree on the method order."""

    blocks = []
    skill = skill_table(stats)
    if not skill.empty:
        head = "### Skill over the controls\n\n" if markdown else "skill over the controls\n"
        blocks.append(f"{head}{SKILL_NOTE}")
        blocks.append((to_markdown(skill) if markdown else to_text(skill)).rstrip("\n"))
    table = reliability_text(stats)
    if not table.empty:
        head = "### Metric reliability\n\n" if markdown else "metric reliability\n"
        blocks.append(
            f"{head}Split-half reliability of each metric's method ranking (Spearman correlation of the methods' "
            "means on two random halves of the samples, mean over 100 splits, Spearman-Brown corrected; 1: the "
            "ranking replicates, 0: it is noise; n/a with fewer than 3 methods or 4 common samples)."
        )
        blocks.append((to_markdown(table) if markdown else to_text(table)).rstrip("\n"))
    if not stats.reruns.empty:
        head = "### Rerun agreement\n\n" if markdown else "rerun agreement\n"
        wide = stats.reruns.assign(rho=stats.reruns["rerun_rho"].map(lambda v: "n/a" if v != v else f"{v:.2f}"))
        wide = wide.pivot_table(index=["model", "method", "seed"], columns="metric", values="rho", aggfunc="first")
        order = list(dict.fromkeys(stats.reruns["metric"]))
        blocks.append(
            f"{head}Seeded methods run again with another seed (suite key `rerun_seeds`): Spearman correlation of "
            "the per-sample scores of the two runs (1: the metric ranks the samples the same whatever the seed)."
        )
        table = wide.reindex(columns=order).fillna("–").reset_index()
        blocks.append((to_markdown(table) if markdown else to_text(table)).rstrip("\n"))
    if not stats.agreement.empty:
        mean = stats.agreement.groupby(["metric_a", "metric_b"], sort=False)["tau"].mean().reset_index()
        mean["tau"] = mean["tau"].map(lambda v: f"{v:+.2f}")
        head = "### Metric agreement\n\n" if markdown else "metric agreement\n"
        blocks.append(
            f"{head}Kendall's tau-b between the method rankings of two metrics on the same model, mean over the "
            "models (+1: same order, -1: reversed; each metric's direction applied)."
        )
        blocks.append((to_markdown(mean) if markdown else to_text(mean)).rstrip("\n"))
    return "\n\n".join(blocks)


def report(
    results_csv: Path,
    out: Path | None = None,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, dict[str, Path], list[Path]]:
    """Tables, statistics and plots for a run; returns the terminal table and the files written.

    The leaderboards mark the best and tied-best methods (:mod:`faithbench.bench.report.statistics`, test level
    ``alpha``, ``n_boot`` bootstrap resamples for P(rank 1)); the Markdown and text ones end with the metrics'
    reliability and agreement and the identical-maps check (:mod:`faithbench.bench.run.identity`). ``progress``
    is told each step as it starts (one short line)."""
    say = progress or (lambda _: None)

    results = read_results(results_csv)
    run_dir = Path(results_csv).parent
    out = out or run_dir / "report"
    say(f"report: statistics ({n_boot} bootstrap resamples)")
    stats = leaderboard_stats(run_dir, results, alpha=alpha, n_boot=n_boot)
    results = first_runs(results)  # reruns: see the statistics
    say("report: tables")
    tables = write_tables(results, out, stats)
    text = to_text(leaderboard(results, stats)) + "".join(f"\n\n{n}" for n in stats.footnote())
    for kind in ("markdown", "text"):
        sections = [
            statistics_section(stats, markdown=kind == "markdown"),
            cost_section(results, kind == "markdown", to_markdown if kind == "markdown" else to_text),
            identity_section(run_dir, kind == "markdown"),
        ]
        section = "\n\n".join(x for x in sections if x)
        if section:
            with tables[kind].open("a") as f:
                f.write("\n" + section + "\n")
            if kind == "text":
                text += "\n\n" + section
    plots = write_plots(run_dir, results, out, stats, progress=say)
    return text, {**tables, **{p.stem: p for p in write_statistics(stats, out)}}, plots
