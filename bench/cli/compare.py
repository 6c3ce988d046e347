"""``python -m bench compare``: the CI gate's command line (:mod:`faithbench.bench.report.gate`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faithbench.bench.cli.catalog import float_floors, gate_defaults, scales
from faithbench.bench.report.formats import to_text
from faithbench.bench.report.gate import FAILING, compare


def signed(value: float) -> str:
    """A difference with the digits that explain it: 4 decimals, or 3 significant ones below 1e-3 (never -0.0000)."""
    if value != value:
        return ""
    if value == 0 or abs(value) >= 1e-3:
        return f"{value:+.4f}"
    return f"{value:+.2e}"


def cmd_compare(args: argparse.Namespace) -> int:
    table, failed = compare(
        Path(args.baseline),
        Path(args.new),
        tolerance=args.tolerance,
        rel_tolerance=args.rel_tolerance,
        two_sided=args.two_sided,
        allow_new_rows=args.allow_new_rows,
        float_floors=float_floors(),  # the registered metrics' (the catalog: no torch import)
        scales=scales(),
        accuracy_floor=args.accuracy_floor,
        max_accuracy_drop=args.max_accuracy_drop,
    )
    differences = table.attrs.get("differences", [])
    if differences:  # what differs between the runs, before any score
        sys.stdout.write("What differs between the runs:\n" + "".join(f"  {line}\n" for line in differences) + "\n")
    shown = table.copy()
    for col in ("mean_base", "mean_new"):
        shown[col] = shown[col].map(lambda v: "" if v != v else f"{v:.4f}")
    for col in ("delta", "delta_ci_low", "delta_ci_high"):
        shown[col] = shown[col].map(signed)
    shown["allowed"] = shown["allowed"].map(lambda v: "" if v != v else f"{v:.2g}")
    shown["n_paired"] = shown["n_paired"].map(lambda v: "" if v != v or v == 0 else str(int(v)))
    if not shown["detail"].astype(bool).any():
        shown = shown.drop(columns="detail")
    sys.stdout.write(to_text(shown) + "\n")
    bad = table[table["status"].isin(FAILING)]
    of_scale = f"{gate_defaults()['abs_of_scale']:g} of each unit's scale"
    absolute = of_scale if args.tolerance is None else f"{args.tolerance:g}"
    two = ", two-sided" if args.two_sided else ""
    settings = f"tolerance {absolute}, relative {args.rel_tolerance:g}{two}"
    base_suite, new_suite = table.attrs.get("suites", ("", ""))
    if failed:
        other = f"; the runs are of different suites ({base_suite} vs {new_suite})" if base_suite != new_suite else ""
        sys.stdout.write(f"\nFAIL: {len(bad)} row(s) {', '.join(sorted(set(bad['status'])))} ({settings}){other}\n")
        for _, row in bad[bad["status"] == "ACCURACY"].iterrows():  # a collapsed model, named on its own line
            sys.stdout.write(
                f"ACCURACY {row['model']}: {_percent(row['mean_base'])} -> {row['mean_new']:.1f} % ({row['detail']})\n"
            )
        return 1
    accepted = int((table["status"] == "new").sum())
    compared = len(table) - accepted
    extra = f"; {accepted} new row(s) accepted (--allow-new-rows)" if accepted else ""
    sys.stdout.write(f"\nOK: {compared} rows within tolerance ({settings}){extra}\n")
    return 0


def _percent(value: float) -> str:
    return "?" if value != value else f"{value:.1f} %"
