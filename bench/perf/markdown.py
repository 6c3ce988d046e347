"""The documentation's perf table (Markdown) from the ``perf.csv`` of one or more ``python -m bench perf`` runs::

    python -m faithbench.bench.perf.markdown runs/perf-1/perf.csv runs/perf-2/perf.csv runs/perf-3/perf.csv

One line per ratio: faithbench to its limit (``ratio_to_limit``) and faithbench to a peer per image (Quantus, captum,
torch-cam: ``ratio_to_quantus``, ``ratio_to_captum``, ``ratio_to_torchcam``; below 1: faithbench is faster; a ratio
column a CSV lacks, written before its peer was timed, has no lines); one column per run with the median over the
pairs and their min-max; the spread of the medians across the runs; the status (``ok``, or ``measurement error`` and
the runs where a ratio to a limit had a median below 0.95).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from faithbench.bench.perf.timing import MEASUREMENT_ERROR, OK

RATIOS = {
    "ratio_to_limit": "limit",
    "ratio_to_quantus": "Quantus, per image",
    "ratio_to_captum": "captum, per image",
    "ratio_to_torchcam": "torch-cam, per image",
}


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else "–"


def ratio_lines(table: pd.DataFrame) -> pd.DataFrame:
    """The ratios of one run: ``what``, ``model``, ``against``, ``limit`` (what the limit does), ``ms`` (faithbench's
    median), ``median``, ``low``, ``high``, ``status``; one line per faithbench row and ratio it has."""
    lines = []
    ours, limits = table[table["implementation"] == "faithbench"], table[table["implementation"] == "limit"]
    for column, against in RATIOS.items():
        if column not in table:
            continue
        for r in ours[ours[column].notna()].itertuples():
            limit = limits[(limits["what"] == r.what) & (limits["model"] == r.model)]
            lines.append(
                {
                    "what": r.what,
                    "model": r.model,
                    "against": against,
                    "limit": limit["note"].iloc[0] if column == "ratio_to_limit" and len(limit) else "",
                    "ms": r.seconds * 1e3,
                    "median": getattr(r, column),
                    "low": getattr(r, f"{column}_min"),
                    "high": getattr(r, f"{column}_max"),
                    "status": r.status if column == "ratio_to_limit" else "",
                }
            )
    return pd.DataFrame(lines, columns=["what", "model", "against", "limit", "ms", "median", "low", "high", "status"])


def docs_table(tables: Sequence[pd.DataFrame]) -> str:
    """The Markdown table of the ratios of ``tables`` (one per run), in the first run's order."""
    runs = [ratio_lines(t).set_index(["what", "model", "against"]) for t in tables]
    head = ["what", "model", "against", "faithbench ms (runs)", *[f"run {i + 1}" for i in range(len(runs))]]
    head += ["medians across runs", "status"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in runs[0].index:
        found = [run.loc[key] for run in runs if key in run.index]
        medians = [line["median"] for line in found]
        ms = [line["ms"] for line in found]
        against = key[2] if key[2] != "limit" else f"limit: {found[0]['limit']}"
        flagged = [str(i + 1) for i, run in enumerate(runs) if key in run.index and run.loc[key]["status"] != OK]
        status = "" if key[2] != "limit" else (f"{MEASUREMENT_ERROR} (run {', '.join(flagged)})" if flagged else OK)
        cells = [key[0], key[1], against, f"{_fmt(min(ms))}-{_fmt(max(ms))}"]
        for run in runs:
            line = run.loc[key] if key in run.index else None
            cells.append("–" if line is None else f"{_fmt(line['median'])} ({_fmt(line['low'])}-{_fmt(line['high'])})")
        cells += [f"{_fmt(min(medians))}-{_fmt(max(medians))}", status]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the docs' perf table from perf.csv files (one per run)")
    parser.add_argument("csv", nargs="+", type=Path, help="perf.csv of python -m bench perf, one per run")
    args = parser.parse_args(argv)
    sys.stdout.write(docs_table([pd.read_csv(p) for p in args.csv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
