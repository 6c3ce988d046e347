"""``python -m bench compare``: the CI gate's command line (:mod:`faithbench.bench.report.gate`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faithbench.bench.cli.catalog import float_floors
from faithbench.bench.report.formats import to_text
from faithbench.bench.report.gate import FAILING, compare


def cmd_compare(args: argparse.Namespace) -> int:
    table, failed = compare(
        Path(args.baseline),
        Path(args.new),
        tolerance=args.tolerance,
        rel_tolerance=args.rel_tolerance,
        two_sided=args.two_sided,
        allow_new_rows=args.allow_new_rows,
        float_floors=float_floors(),  # the registered metrics' (the catalog: no torch import)
    )
    differences = table.attrs.get("differences", [])
    if differences:  # what differs between the runs, before any score
        sys.stdout.write("What differs between the runs:\n" + "".join(f"  {line}\n" for line in differences) + "\n")
    shown = table.copy()
    for col in ("mean_base", "mean_new", "delta", "delta_ci_low", "delta_ci_high"):
        fmt = "{:+.4f}" if col.startswith("delta") else "{:.4f}"
        shown[col] = shown[col].map(lambda v, fmt=fmt: "" if v != v else fmt.format(v))
    if not shown["detail"].astype(bool).any():
        shown = shown.drop(columns="detail")
    sys.stdout.write(to_text(shown) + "\n")
    bad = table[table["status"].isin(FAILING)]
    settings = f"tolerance {args.tolerance}, relative {args.rel_tolerance}{', two-sided' if args.two_sided else ''}"
    base_suite, new_suite = table.attrs.get("suites", ("", ""))
    if failed:
        other = f"; the runs are of different suites ({base_suite} vs {new_suite})" if base_suite != new_suite else ""
        sys.stdout.write(f"\nFAIL: {len(bad)} row(s) {', '.join(sorted(set(bad['status'])))} ({settings}){other}\n")
        return 1
    accepted = int((table["status"] == "new").sum())
    compared = len(table) - accepted
    extra = f"; {accepted} new row(s) accepted (--allow-new-rows)" if accepted else ""
    sys.stdout.write(f"\nOK: {compared} rows within tolerance ({settings}){extra}\n")
    return 0
