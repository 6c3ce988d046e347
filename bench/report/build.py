"""A run's report from its CSV files: the leaderboard (text, Markdown, LaTeX), the statistics files, the figures and
one self-contained HTML page with all of it (``index.html``); the terminal gets the headline and where the rest is."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.report.card import run_card
from faithbench.bench.report.figures import write_plots
from faithbench.bench.report.formats import WIDTH, to_latex, to_markdown, to_text
from faithbench.bench.report.order import is_control
from faithbench.bench.report.page import report_page
from faithbench.bench.report.sections import Section, report_sections
from faithbench.bench.report.statistics_section import BEST, TIED, leaderboard_stats, write_statistics
from faithbench.bench.report.tables import headline, leaderboard
from faithbench.bench.store import identity
from faithbench.bench.store.results import WRITTEN_COLUMNS, first_runs, read_results
from faithbench.bench.store.run_catalog import reading, recorded
from faithbench.errors import UserError
from faithbench.io import writable_folder

__all__ = ["headline", "leaderboard", "report", "to_text", "write_tables"]


def write_tables(table: pd.DataFrame, notes: list[str], sections: list[Section], out: Path) -> dict[str, Path]:
    """The leaderboard in Markdown, LaTeX and text, each with the statistics' footnote under it; the Markdown and
    text ones end with the report's sections (text: columns wrapped into blocks of at most ``WIDTH`` characters)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "leaderboard.md", "latex": out / "leaderboard.tex", "text": out / "leaderboard.txt"}
    tail_md = "".join(f"\n{s.markdown()}\n" for s in sections)
    paths["markdown"].write_text(to_markdown(table) + "".join(f"\n{n}\n" for n in notes) + tail_md)
    latex_notes = "".join(f"\n% {n}\n" for n in notes).replace(BEST, "star").replace(TIED, "approx")
    paths["latex"].write_text(to_latex(table) + latex_notes)
    text = [
        to_text(table, width=WIDTH, keys=2),
        *(textwrap.fill(n, WIDTH) for n in notes),
        *(s.text() for s in sections),
    ]
    paths["text"].write_text("\n\n".join(text) + "\n")
    return paths


def _summary(results: pd.DataFrame, run: dict[str, Any]) -> str:
    suite, prov = run.get("suite", {}), run.get("provenance", {})
    methods = list(dict.fromkeys(results["method"]))
    n_controls = sum(map(is_control, methods))
    parts = [
        f"{suite.get('description', '')}".strip(),
        f"{results['model'].nunique()} models x {len(methods) - n_controls} methods (+ {n_controls} controls) x "
        f"{results['metric'].nunique()} metrics, {suite.get('n_samples', '?')} samples, seed {suite.get('seed', '?')}",
        f"controls: {', '.join(m for m in methods if is_control(m)) or 'none'}; "
        f"tiers: {', '.join(suite.get('tiers', [])) or 'none'}",
        f"created {prov.get('created_utc', '?')} on {prov.get('device', '?')}",
        f"faithbench {prov.get('faithbench_version', '?')} (git {str(prov.get('git_revision', '?'))[:10]})",
    ]
    return ". ".join(p for p in parts if p) + "."


def report(
    results_csv: Path,
    out: Path | None = None,
    *,
    alpha: float = 0.05,
    n_boot: int = 1000,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, dict[str, Path], list[Path]]:
    """Tables, statistics, figures and the report page of a run; returns the headline text for the terminal (the
    best method per model and metric, and where the rest is) and the files written.

    The leaderboards mark the best and tied-best methods (:mod:`faithbench.bench.report.statistics`, test level
    ``alpha``, ``n_boot`` bootstrap resamples for P(rank 1)); the Markdown and text ones end with the metrics'
    reliability and agreement, the cost and the identical-maps check (:mod:`faithbench.bench.store.identity`).
    ``progress`` is told each step as it starts (one short line)."""
    with reading(recorded(Path(results_csv).parent)):  # the orders and names the run recorded, not the installed ones
        return _report(Path(results_csv), out, alpha, n_boot, progress)


def _report(
    results_csv: Path, out: Path | None, alpha: float, n_boot: int, progress: Callable[[str], None] | None
) -> tuple[str, dict[str, Path], list[Path]]:
    say = progress or (lambda _: None)
    results = read_results(results_csv, WRITTEN_COLUMNS)
    if results.empty:  # a run whose every pair was skipped, or a file cut to its header
        raise UserError(f"{results_csv} holds no result rows: nothing to report (a run's skipped.json says why)")
    run_dir = Path(results_csv).parent
    out = writable_folder(out or run_dir / "report", "the report")  # before the statistics, not after
    say(f"report: statistics ({n_boot} bootstrap resamples)")
    stats = leaderboard_stats(run_dir, results, alpha=alpha, n_boot=n_boot)
    results = first_runs(results)  # reruns: see the statistics
    try:
        run = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        run = {}
    say("report: report card of the metrics")
    card = run_card(run_dir, results, stats, list(run.get("suite", {}).get("tiers", [])))
    say("report: tables")
    table, notes = leaderboard(results, stats), stats.footnote()
    sections = report_sections(stats, results, run_dir, card)
    files = write_tables(table, notes, sections, out)
    files.update({p.stem: p for p in write_statistics(stats, out)})
    if card is not None:
        files["report_card"] = out / "report_card.csv"
        card.to_csv(files["report_card"], index=False)
    plots = write_plots(run_dir, results, out, stats, progress=say, card=card)
    say("report: page")
    suite = run.get("suite", {}).get("name") or str(results["suite"].iloc[0] if "suite" in results else "")
    head = headline(results, stats)
    page = report_page(
        title=f"faithbench report: {suite}",
        summary=_summary(results, run),
        headline=head,
        leaderboard=table,
        notes=notes,
        figures=plots,
        sections=sections,
        run=run,
        controls={m for m in results["method"] if is_control(m)},
    )
    files = {"html": out / "index.html", **files}
    files["html"].write_text(page, encoding="utf-8")
    text = (
        to_text(head, width=WIDTH, keys=1)
        + f"\n\nBest method of each model and metric ({BEST} in the leaderboard) and its mean; (+k {TIED}): k more "
        f"methods not significantly worse.\nEvery method with its 95 % interval: {files['text']}\n"
        f"The report page (tables, figures, statistics, settings): {files['html']}"
    )
    unexpected = [p for p in (identity.read(run_dir) or {}).get("pairs", []) if p["status"] != "expected"]
    if unexpected:
        pairs = "; ".join(f"{p['model']}: {' = '.join(p['methods'])}" for p in unexpected)
        text += f"\nIdentical maps no known identity explains (see the report): {pairs}"
    return text, files, plots
