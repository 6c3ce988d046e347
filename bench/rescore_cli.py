"""``python -m bench rescore``: the command line of :mod:`faithbench.bench.rescore`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def _cmd_rescore(args: argparse.Namespace, quiet: Callable) -> int:
    from pathlib import Path

    from faithbench.bench.report import report, to_text
    from faithbench.bench.rescore import parse_settings, rescore

    settings = parse_settings(args.set or [])
    with quiet(args.no_progress):
        results, flips, notes = rescore(Path(args.run), settings, Path(args.out) if args.out else None, args.device)
    if results.empty:
        sys.stderr.write("nothing could be re-scored:\n" + "\n".join(notes) + "\n")
        return 1
    text, _, _ = report(Path(results.attrs["results_csv"]))
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


def add_rescore_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser, quiet: Callable) -> None:
    """The ``rescore`` subcommand; ``quiet(disable)`` silences progress bars (the CLI's ``--no-progress``)."""
    p_res = sub.add_parser(
        "rescore", parents=[common], help="score a finished run's stored maps again under other metric settings"
    )
    p_res.add_argument("run", help="a run folder (with maps/, written by `run`)")
    p_res.add_argument(
        "--set", action="append", metavar="TABLE.KEY=VALUE", help="a metric setting, e.g. deletion.baseline=blur"
    )
    p_res.add_argument("--out", help="output folder (default: RUN/rescored/SETTINGS)")
    p_res.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p_res.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_res.set_defaults(func=lambda args: _cmd_rescore(args, quiet))
