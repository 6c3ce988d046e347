"""``python -m bench status RUN``: how far a run (and its workers) got, read from its folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from faithbench.bench.report.formats import to_text
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.run_status import run_status
from faithbench.bench.run.suite import recorded_suite
from faithbench.bench.store.results import RunStore


def cmd_status(args: argparse.Namespace) -> int:
    run_dir = Path(args.run)
    record = RunStore(run_dir).read_record()
    plan = resolve(recorded_suite(record, run_dir / "run.json"))
    table, running = run_status(run_dir, plan)
    sys.stdout.write(to_text(table, width=120, keys=1) + "\n")
    total = table.sum(numeric_only=True)
    finished = total["done"] + total["skipped"] == total["units"]
    sys.stdout.write(
        f"\n{int(total['done'])} of {int(total['units'])} units done, {int(total['skipped'])} skipped; pieces: "
        f"{int(total['pieces done'])} done, {int(total['running'])} running, {int(total['stale'])} stale (a dead "
        f"worker's: the next worker takes them over), {int(total['left'])} left"
        + (" -- the run is complete\n" if finished else "\n")
    )
    if total["outdated"]:
        sys.stdout.write(
            f"{int(total['outdated'])} units in the folder were computed by other code or settings: running the "
            "suite again recomputes them\n"
        )
    for line in running:
        sys.stdout.write(f"  running {line}\n")
    return 0
