"""``python -m bench report RUN [RUN ...]``: the report of a finished run, from its files alone (no model, method or
metric module is imported: the run recorded the registries' names and orders it needs); of several runs, merged
first (``python -m bench merge``: :mod:`faithbench.bench.report.merge`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faithbench.bench.report.build import report
from faithbench.bench.report.merge import merge_runs, results_file
from faithbench.errors import UserError


def say(line: str) -> None:
    """A progress line of the report (its steps can take minutes on a large run) on stderr, beside the run's."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def cmd_report(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must lie in (0, 1), got {args.alpha}")
    if args.n_boot < 100:
        raise UserError(f"--n-boot must be at least 100, got {args.n_boot}")
    out = Path(args.out) if args.out else None
    if len(args.results) > 1:
        merged = merge(args.results, out or Path("runs") / "merged")
        results, out = merged / "results.csv", None
    else:
        results = results_file(args.results[0])
    text, tables, plots = report(results, out, alpha=args.alpha, n_boot=args.n_boot, progress=say)
    sys.stdout.write(text + "\n\n")
    folder = tables["html"].parent
    sys.stdout.write(f"wrote {len(tables)} tables and {len(plots)} figures to {folder} (the page: index.html)\n")
    return 0


def merge(runs: list[str], out: Path) -> Path:
    """Merge ``runs`` into ``out``, saying what was merged and what differs (reported only); returns ``out``."""
    merged = merge_runs(runs, out)
    for line in merged.notes:
        sys.stderr.write(f"note: {line}\n")
    n = merged.results.groupby(["model", "method", "metric"]).ngroups
    sys.stdout.write(f"merged {len(runs)} runs into {out}: {n} (model, method, metric) rows (results.json beside)\n")
    return out


def cmd_merge(args: argparse.Namespace) -> int:
    merge(args.runs, Path(args.out))
    return 0
