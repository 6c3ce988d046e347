"""A unit in pieces: piece c of K scores every metric of the unit on its items i with i % K == c (samples, grids).

Pieces are the work that workers claim (:mod:`faithbench.bench.store.claims`): ``pieces/MODEL__JOB.CofK.json`` holds
one piece's per-sample records under the unit's key. A piece is computed the same way whichever worker computes
it, and a unit is the merge of its K pieces in piece order, so a unit's scores are the same bytes from 1 worker or
N, on any mix of hosts, in any order, resumed at any point. ``K`` is the suite's ``pieces`` (default 1: a unit is
one piece; more pieces let several workers share a slow unit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from faithbench.io import atomic_write_text

# Per-sample columns of a metric's record, concatenated over the pieces in sample order; the cost columns add up
# (the pieces' explanations and model calls all happened), the peak memory is the largest piece's.
_PER_SAMPLE = ("values", "undefined", "sample_ids", "curve")
_SUMMED = ("explain_time_s", "metric_time_s", "model_calls", "model_inputs")


def piece_name(model: str, job: str, piece: int, of: int) -> str:
    return f"{model}__{job}.{piece}of{of}"


class PieceStore:
    """The pieces of a run folder (``RUN/pieces``)."""

    def __init__(self, out: Path) -> None:
        self.folder = Path(out) / "pieces"

    def path(self, model: str, job: str, piece: int, of: int) -> Path:
        return self.folder / f"{piece_name(model, job, piece, of)}.json"

    def _read(self, model: str, job: str, piece: int, of: int) -> dict | None:
        """The piece's file as a record (None: missing, torn, not a record)."""
        try:
            record = json.loads(self.path(model, job, piece, of).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return record if isinstance(record, dict) else None

    def load(self, model: str, job: str, key: str, piece: int, of: int) -> dict | None:
        """A finished piece of the unit with this key (None: missing, another key, unreadable)."""
        record = self._read(model, job, piece, of)
        return record if record is not None and record.get("key") == key else None

    def readable(self, model: str, job: str, piece: int, of: int) -> bool:
        """Whether the piece's file holds a finished piece of this unit (a torn or foreign file does not count);
        its key (the model's weights) is checked when the unit runs."""
        record = self._read(model, job, piece, of) or {}
        want = {"model": model, "job": job, "piece": piece, "of": of}
        return all(record.get(k) == v for k, v in want.items()) and "metrics" in record

    def has(self, model: str, job: str, key: str, piece: int, of: int) -> bool:
        return self.load(model, job, key, piece, of) is not None

    def save(self, model: str, job: str, key: str, piece: int, of: int, metrics: dict, **extra: Any) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"key": key, "model": model, "job": job, "piece": piece, "of": of, "metrics": metrics, **extra}
        atomic_write_text(self.path(model, job, piece, of), json.dumps(record))

    def complete(self, model: str, job: str, key: str, of: int) -> list[dict] | None:
        """All K pieces of the unit, in piece order, or None while one is missing."""
        pieces = [self.load(model, job, key, c, of) for c in range(of)]
        return None if any(p is None for p in pieces) else pieces  # type: ignore[return-value]


def merge_pieces(pieces: list[dict]) -> dict[str, dict]:
    """The unit's per-metric records from its pieces (each ``{"metrics": {name: record}}``), samples in id order."""
    merged: dict[str, dict] = {}
    for metric in pieces[0]["metrics"]:
        recs = [p["metrics"][metric] for p in pieces]
        ids = [sid for r in recs for sid in r["sample_ids"]]
        order = sorted(range(len(ids)), key=ids.__getitem__)
        out = dict(recs[0])
        for key in _PER_SAMPLE:
            if any(r[key] is not None for r in recs):
                flat = [v for r in recs for v in (r[key] or [])]
                out[key] = [flat[i] for i in order]
        if out["fractions"] is None:
            out["fractions"] = next((r["fractions"] for r in recs if r["fractions"] is not None), None)
        for key in _SUMMED:
            if all(key in r for r in recs):
                out[key] = sum(r[key] for r in recs)
        if all("peak_memory_mb" in r for r in recs):
            peaks = [r["peak_memory_mb"] for r in recs if r["peak_memory_mb"] is not None]
            out["peak_memory_mb"] = max(peaks) if peaks else None
        merged[metric] = out
    return merged
