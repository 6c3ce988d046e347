"""``python -m bench report RESULTS``: the report of a finished run, from its files alone (no model, method or
metric module is imported: the run recorded the registries' names and orders it needs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faithbench.bench.report.build import report
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
    text, tables, plots = report(
        Path(args.results), Path(args.out) if args.out else None, alpha=args.alpha, n_boot=args.n_boot, progress=say
    )
    sys.stdout.write(text + "\n\n")
    folder = tables["html"].parent
    sys.stdout.write(f"wrote {len(tables)} tables and {len(plots)} figures to {folder} (the page: index.html)\n")
    return 0
