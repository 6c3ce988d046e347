"""``identical_maps.json``: the methods of a model whose maps agree, as a run recorded them (computed by
:mod:`faithbench.bench.run.fingerprints`), and the lines that state each pair.

A flagged pair is labelled ``expected`` when a known identity explains it (with its reason), else ``unexpected``: a
method that has silently become another one, to be fixed or refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from faithbench.io import atomic_write_text

FINGERPRINT_IMAGES = 2  # enough: two methods that differ do so on every image in practice
FINGERPRINT_VALUES = 1024  # per map; 28-32 px maps are kept whole (a unit file grows by ~11 KB)
RTOL = 1e-5
RULE = (
    f"max |a - b| <= {RTOL:g} * max(max |a|, max |b|) over the two methods' maps of the first "
    f"{FINGERPRINT_IMAGES} per-sample images (for their labels)"
)
FILE = "identical_maps.json"


def verdict(pair: dict[str, Any]) -> str:
    return f"expected ({pair['reason']})" if pair["status"] == "expected" else "unexpected"


def warning_line(pair: dict[str, Any]) -> str:
    a, b = pair["methods"]
    return (
        f"[faithbench] warning: on {pair['model']}, methods {a} and {b} give the same maps "
        f"(max |a - b| = {pair['max_rel_diff']:.1e} x max |map| on {pair['images']} images): {verdict(pair)}"
    )


def write(out: Path, pairs: list[dict[str, Any]]) -> None:
    record = {"rule": RULE, "rtol": RTOL, "pairs": pairs}
    atomic_write_text(out / FILE, json.dumps(record, indent=2))


def read(run_dir: Path) -> dict[str, Any] | None:
    """A run's flagged pairs (None: the run predates the check or the file is unreadable)."""
    try:
        return json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
