"""``python -m bench list``: the registries, printed as text or (``--markdown``) as the documentation's reference page
(``docs/reference.md`` is this output; a test fails when the two drift apart). The tables come from the catalog
(:mod:`faithbench.bench.cli.catalog`), so listing imports no registry and no torch."""

from __future__ import annotations

import argparse
import sys

from faithbench.bench.cli.catalog import Table, tables


def as_text(sections: list[Table]) -> str:
    """One block per table: its title, then a line per row with the columns aligned (the last one free)."""
    lines = []
    for title, columns, rows in sections:
        widths = [max(len(r[i]) for r in rows) for i in range(len(columns) - 1)] if rows else []
        lines += ["", f"{title}:"]
        lines += ["  " + "".join(c.ljust(w + 1) for c, w in zip(r[:-1], widths, strict=True)) + r[-1] for r in rows]
    return "\n".join(lines[1:]) + "\n"


def as_markdown(sections: list[Table]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "# Reference",
        "",
        "Every registered metric, convention, model, attribution method, data set and suite, and every key of a suite",
        "file and of its settings tables with its default, as `python -m bench list --markdown` prints them (this page",
        "is that output; a test fails when they drift apart).",
    ]
    for title, columns, rows in sections:
        lines += ["", f"## {title[0].upper()}{title[1:]}", "", "| " + " | ".join(columns) + " |"]
        lines += ["| " + " | ".join("---" for _ in columns) + " |"]
        lines += ["| " + " | ".join([f"`{r[0]}`", *map(cell, r[1:])]) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def cmd_list(args: argparse.Namespace) -> int:
    """``python -m bench list [--markdown]``."""
    sections = tables()
    sys.stdout.write(as_markdown(sections) if getattr(args, "markdown", False) else as_text(sections))
    return 0
