"""``python -m bench rescore``: the command line of :mod:`faithbench.bench.run.rescore`."""

from __future__ import annotations

import argparse
import sys

from faithbench.bench.cli.run import no_progress_bars, say
from faithbench.bench.report.build import report, to_text
from faithbench.bench.run.rescore import parse_settings, rescore


def cmd_rescore(args: argparse.Namespace) -> int:
    from pathlib import Path

    settings = parse_settings(args.set or [])
    with no_progress_bars(args.no_progress):
        results, flips, notes = rescore(Path(args.run), settings, Path(args.out) if args.out else None, args.device)
    if results.empty:
        sys.stderr.write("nothing could be re-scored:\n" + "\n".join(notes) + "\n")
        return 1
    text, _, _ = report(Path(results.attrs["results_csv"]), progress=None if args.no_progress else say)
    sys.stdout.write(f"leaderboard, re-scored with {settings or 'the run settings'}:\n{text}\n\n")
    if not flips.empty:
        changed = flips[flips["n_flipped_pairs"] > 0]
        sys.stdout.write(
            f"rankings that changed ({len(changed)} of {len(flips)} model x metric tables; "
            f"best before -> after, flipped method pairs):\n"
        )
        sys.stdout.write((to_text(changed) if not changed.empty else "none") + "\n")
    for note in notes:
        sys.stdout.write(f"left out: {note}\n")
    sys.stdout.write(f"results:  {results.attrs['results_csv']}\n")
    return 0
