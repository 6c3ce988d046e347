"""``results.json``: a run as one JSON document beside its CSVs, for tools that read JSON rather than tables.

    {"format": "faithbench-results/1", "suite": {...}, "provenance": {...}, "models": {...},
     "merged_from": [...], "rows": [{"model": ..., "method": ..., "metric": ..., "mean": ..., "params": {...}}, ...]}

``suite``, ``provenance`` and ``models`` are run.json's (the suite as run, the environment, every model's held-out
accuracy); ``merged_from`` names the runs a merged folder combines (absent otherwise); ``rows`` are results.csv's rows,
empty cells as null and ``params`` as an object. The CSVs stay the source: the JSON is rewritten with them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.io import atomic_write_text

FORMAT = "faithbench-results/1"


def run_document(folder: Path, results: pd.DataFrame) -> dict[str, Any]:
    """The JSON document of the run in ``folder`` whose rows are ``results``."""
    try:
        record = json.loads((Path(folder) / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        record = {}
    rows = results.astype(object).where(results.notna(), None).to_dict("records")
    for row in rows:
        if isinstance(row.get("params"), str):
            try:
                row["params"] = json.loads(row["params"])
            except json.JSONDecodeError:
                pass  # a hand-edited cell stays text
    keys = ("suite", "provenance", "models", "merged_from")
    return {"format": FORMAT, **{k: record[k] for k in keys if k in record}, "rows": rows}


def write_run_document(folder: Path, results: pd.DataFrame) -> Path:
    """Write ``results.json`` into ``folder``; returns its path."""
    path = Path(folder) / "results.json"
    atomic_write_text(path, json.dumps(run_document(folder, results), indent=1, default=str) + "\n")
    return path
