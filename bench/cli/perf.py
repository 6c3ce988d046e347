"""``python -m bench perf``: run the timing harness (:mod:`faithbench.bench.perf.harness`), print its table."""

from __future__ import annotations

import argparse
import sys
import time

from faithbench.bench.perf.harness import format_table, run_perf


def cmd_perf(args: argparse.Namespace) -> int:
    """Run, print the table and the notes, say where the files are."""
    start = time.perf_counter()
    run = run_perf(args.device, quick=args.quick, repeats=args.repeats, out=args.out)
    sys.stdout.write(format_table(run.table) + "\n")
    for note in run.notes:
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(f"wrote {run.csv} and perf.json beside it ({time.perf_counter() - start:.1f} s)\n")
    return 0
