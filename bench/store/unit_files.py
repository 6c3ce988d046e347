"""What a worker may do next in a shared run folder, decided from the folder's files alone.

A unit is reused when the folder holds it under its key; else each of its free pieces is claimed
(:mod:`~faithbench.bench.store.claims`) while the caller computes it (the only step that is not file work), and
saved as :mod:`~faithbench.bench.store.pieces` describes; once all of a unit's pieces exist, they are merged into
the unit and deleted. The unit's example map is claimed the same way, its model's identical-maps record cached.
Nothing here loads a model, computes or knows the plan: the callers pass a unit's :class:`UnitRef` and what they
computed, and say before they write (the first new file of a run takes the folder over: the caller's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from faithbench.bench.store.claims import Claims
from faithbench.bench.store.examples import has_example
from faithbench.bench.store.examples import save_example as save_example_file
from faithbench.bench.store.pieces import PieceStore, merge_pieces, piece_name
from faithbench.bench.store.results import RunStore
from faithbench.io import atomic_write_text


class UnitRef(NamedTuple):
    """A unit in the folder: its model, its job (the method or control as the suite names it) and its key."""

    model: str
    job: str
    key: str


class Piece(NamedTuple):
    """One computed piece: every metric's records on its items, its maps' state (None: maps not kept), and what
    its record carries besides (provenance, seconds, the unit's fingerprint on piece 0)."""

    records: dict
    maps: dict | None
    extra: dict[str, Any]


@dataclass(kw_only=True)
class UnitFiles:
    """A worker's file work in run folder ``out``, whose units come in ``pieces`` pieces."""

    out: Path
    pieces: int
    store: RunStore = field(init=False)
    piece_store: PieceStore = field(init=False)
    claims: Claims = field(init=False)

    def __post_init__(self) -> None:
        self.store, self.piece_store = RunStore(self.out), PieceStore(self.out)
        self.claims = Claims(self.out / "claims")

    def unit(self, ref: UnitRef) -> dict | None:
        """The unit the folder holds under its key (None: not there, or under another key)."""
        return self.store.load_unit(*ref)

    @contextmanager
    def _claimed(self, claim: str) -> Iterator[bool]:
        """Whether this worker holds ``claim`` inside the block (released when it ends, whatever happens)."""
        if not self.claims.claim(claim):
            yield False
            return
        try:
            yield True
        finally:
            self.claims.release(claim)

    def free_pieces(self, ref: UnitRef) -> list[int]:
        """The unit's pieces not saved (each then claimed, one at a time: :meth:`piece_claim`)."""
        return [c for c in range(self.pieces) if not self.piece_store.has(*ref, c, self.pieces)]

    @contextmanager
    def piece_claim(self, ref: UnitRef, c: int) -> Iterator[bool]:
        """Whether this worker computes piece ``c`` inside the block (then saved by :meth:`save_piece`): claimed,
        and still neither saved nor merged."""
        with self._claimed(piece_name(ref.model, ref.job, c, self.pieces)) as held:
            # finished while we looked, or merged: a merge saves the unit before it deletes the pieces, so a piece
            # gone for that reason is seen here as the unit (computing it again left it behind)
            free = held and not self.piece_store.has(*ref, c, self.pieces)
            yield free and self.unit(ref) is None

    def save_piece(self, ref: UnitRef, c: int, piece: Piece) -> None:
        if piece.maps is not None:
            self.store.save_maps(*ref, piece.maps, c)
        self.piece_store.save(*ref, c, self.pieces, piece.records, **piece.extra)

    def complete(self, ref: UnitRef) -> bool:
        """Whether every piece of the unit is saved (it can be merged)."""
        return all(self.piece_store.has(*ref, c, self.pieces) for c in range(self.pieces))

    def merge(self, ref: UnitRef, head: Mapping[str, Any]) -> dict | None:
        """The unit from its pieces, if all exist (None: pieces other workers hold): ``head`` (its names, key and
        columns) then the merged records, the provenance and fingerprint of piece 0; saved, so from here on it is
        done, then its pieces deleted."""
        parts = self.piece_store.complete(*ref, self.pieces)
        if parts is None:
            return None
        record = {
            **head,
            "pieces": self.pieces,
            "piece_time_s": max(p.get("seconds", 0.0) for p in parts),  # the longest piece: what a worker must allow
            "provenance": parts[0]["provenance"],
            "metrics": merge_pieces(parts),
            "fingerprint": parts[0].get("fingerprint"),
            # rows per call stepped down to after out-of-memory errors while its pieces ran (cost, not protocol)
            "call_sizes": {k: v for p in parts for k, v in (p.get("call_sizes") or {}).items()},
        }
        self.store.save_unit(record)
        for c in range(self.pieces):  # the unit holds all they held (a worker merging at the same time rereads it)
            self.piece_store.path(ref.model, ref.job, c, self.pieces).unlink(missing_ok=True)
        return record

    @contextmanager
    def example_claim(self, ref: UnitRef) -> Iterator[bool]:
        """Whether this worker draws the unit's example map for the report's panel inside the block (then saved by
        :meth:`save_example`): missing, and claimed (one worker draws it)."""
        if has_example(self.out, *ref):
            yield False
            return
        with self._claimed(f"{ref.model}__{ref.job}.example") as held:
            yield held

    def save_example(self, ref: UnitRef, example: Any) -> None:
        save_example_file(self.out, *ref, example)

    def identity_path(self, model: str) -> Path:
        return self.out / "identical" / f"{model}.json"

    def identities(self, model: str, keys: list[str]) -> list[dict] | None:
        """Model ``model``'s method pairs with identical maps, as saved for its units' ``keys`` (sorted); None: none
        saved for those keys."""
        try:
            record = json.loads(self.identity_path(model).read_text())
        except (OSError, ValueError):
            return None
        return record.get("pairs", []) if isinstance(record, dict) and record.get("keys") == keys else None

    def save_identities(self, model: str, keys: list[str], pairs: list[dict]) -> None:
        self.identity_path(model).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.identity_path(model), json.dumps({"keys": keys, "pairs": pairs}))

    def identical(self, keys: Mapping[str, list[str]]) -> list[dict]:
        """The saved pairs of each model in ``keys`` (model -> its done units' sorted keys) whose record is of
        those keys, in the mapping's order."""
        return [pair for model, ks in keys.items() for pair in self.identities(model, ks) or []]

    def close(self) -> None:
        self.claims.close()
