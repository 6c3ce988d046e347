"""``python -m bench rescore``: the command line of :mod:`faithbench.bench.run.rescoring` and, with ``--sweep``, of
:mod:`faithbench.bench.run.sweep` (the rankings compared by :mod:`faithbench.bench.report.protocols`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from faithbench.bench.cli.reporting import say
from faithbench.bench.cli.run import no_progress_bars
from faithbench.bench.report.build import report, to_text
from faithbench.bench.report.formats import WIDTH
from faithbench.bench.report.protocols import EVERY, PROTOCOLS_CSV, SUMMARY_CSV, write_protocols
from faithbench.bench.run.rescoring import parse_settings, rescore
from faithbench.bench.run.sweep import Protocol, sweep
from faithbench.errors import UserError


def cmd_rescore(args: argparse.Namespace) -> int:
    if args.sweep or args.sweep_key:
        return cmd_sweep(args)
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """``rescore RUN --sweep``: one re-score per scoring-only alternative, then protocols.csv and its summary."""
    if args.set or args.out:
        raise UserError("--sweep varies the run's own settings, one at a time, into RUN_DIR/rescored: no --set, --out")
    run = Path(args.run)

    def announce(i: int, n: int, protocol: Protocol) -> None:
        say(f"protocol {i + 1}/{n}: {protocol.name} ({', '.join(protocol.metrics)})")

    with no_progress_bars(args.no_progress):
        done = sweep(run, args.sweep_key or [], args.device, on_protocol=announce)
    table, summary = write_protocols(run, [protocol for protocol, _ in done])
    shown = table.assign(tau=table["tau"].map(lambda t: "n/a" if pd.isna(t) else f"{t:.2f}"))
    columns = ["model", "metric", "protocol", "n_methods", "tau", "n_flipped_pairs", "best", "tied_best"]
    sys.stdout.write(f"rankings across protocols (Kendall tau-b with the run's ranking, flipped method pairs, best and "
                     f"tied-best methods):\n{to_text(shown[columns], width=WIDTH, keys=3)}\n\n")  # fmt: skip
    every = summary["best_under_every_protocol"]
    shown = summary.assign(
        min_tau=summary["min_tau"].map(lambda t: "n/a" if pd.isna(t) else f"{t:.2f}"),
        best_under_every_protocol=every.where(every != "", "none"),
    )
    sys.stdout.write(f"per model x metric, over every protocol:\n{to_text(shown, width=WIDTH, keys=2)}\n\n")
    for protocol, notes in done:
        for note in notes:
            sys.stdout.write(f"left out under {protocol.name}: {note}\n")
    folder = run / "rescored"
    sys.stdout.write(
        f"tables:   {folder / PROTOCOLS_CSV}, {folder / SUMMARY_CSV}\n"
        f"the leaderboard marks {EVERY} the methods tied-best under every protocol: "
        f"python -m bench report {run / 'results.csv'}\n"
    )
    return 0
