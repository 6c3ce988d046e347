"""``python -m bench perf``: run the timing harness (:mod:`faithbench.bench.perf.harness`), print its table."""

from __future__ import annotations

import argparse
import sys
import time

from faithbench.bench.perf.cases import parse_case
from faithbench.bench.perf.harness import format_table, run_perf
from faithbench.errors import UserError


def cmd_perf(args: argparse.Namespace) -> int:
    """Run, print the table, the notes and every ratio flagged as a measurement error, say where the files are."""
    start = time.perf_counter()
    try:
        cases = [parse_case(c, args.quick) for c in args.case] if args.case else None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else None
    run = run_perf(args.device, quick=args.quick, repeats=args.repeats, out=args.out, cases=cases, only=only,
                   say=lambda line: print(line, file=sys.stderr))  # fmt: skip
    sys.stdout.write(format_table(run.table) + "\n")
    for note in run.notes:
        sys.stdout.write(f"note: {note}\n")
    for error in run.errors:
        sys.stdout.write(f"measurement error: {error}\n")
    if not run.errors:
        sys.stdout.write("every ratio to a limit is at least 0.95 (status ok)\n")
    sys.stdout.write(f"wrote {run.csv} and perf.json beside it ({time.perf_counter() - start:.1f} s)\n")
    return 0
