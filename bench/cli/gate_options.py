"""The options of ``compare`` (the CI gate), with the defaults it states in ``--help`` (from the catalog: parsing
imports nothing heavy)."""

from __future__ import annotations

import argparse

from faithbench.bench.cli.catalog import gate_defaults


def add_compare(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p_cmp = sub.add_parser(
        "compare",
        parents=[common],
        help="CI gate: per-(model, method, metric) differences, non-zero exit on a regression or another protocol",
    )
    p_cmp.add_argument("baseline", metavar="BASELINE_CSV", help="baseline results.csv")
    p_cmp.add_argument("new", metavar="NEW_CSV", help="new results.csv")
    gate = gate_defaults()
    absolute = gate["abs_of_scale"]
    p_cmp.add_argument(
        "--tolerance",
        type=float,
        default=None,
        metavar="FLOAT",
        help=f"allowed change, in each metric's reported unit (default: {absolute:g} of the unit's full scale, i.e. "
        f"{absolute:g} for scores in 0-1, {100 * absolute:g} points for percentages)",
    )
    p_cmp.add_argument(
        "--rel-tolerance",
        type=float,
        metavar="FLOAT",
        default=gate["relative"],
        help=f"allowed change as a fraction of the baseline score; the larger allowance wins (default "
        f"{gate['relative']:g}: passes float noise of other pieces, workers, batch sizes and CPU types)",
    )
    p_cmp.add_argument(
        "--accuracy-floor",
        type=float,
        default=None,
        metavar="PERCENT",
        help="fail a model whose held-out accuracy in the new run is not above this (default: chance, the most "
        "frequent label's share, plus 3 standard errors)",
    )
    p_cmp.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=gate["accuracy_drop"],
        metavar="POINTS",
        help=f"fail a model whose held-out accuracy fell more than this below the baseline's (default "
        f"{gate['accuracy_drop']:g} points)",
    )
    p_cmp.add_argument("--two-sided", action="store_true", help="also fail when a score improves beyond tolerance")
    p_cmp.add_argument(
        "--allow-new-rows",
        action="store_true",
        help="accept (model, method, metric) rows only in NEW_CSV instead of failing on them (status new)",
    )


def add_numerics(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p_num = sub.add_parser(
        "numerics",
        parents=[common],
        help='the portable CPU numerics as shell lines: eval "$(faithbench numerics)" before a run that a gate on '
        "another machine compares (recorded in every row: numerics)",
    )
    p_num.add_argument(
        "--check", action="store_true", help="say which numerics this shell has; exit 1 unless they are the portable"
    )
