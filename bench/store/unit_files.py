"""What a worker may do next in a shared run folder, decided from the folder's files alone.

A unit is reused when the folder holds it under its key; else its free pieces are claimed
(:mod:`~faithbench.bench.store.claims`) and computed by the caller's ``compute`` (the only step that is not file
work), each saved as :mod:`~faithbench.bench.store.pieces` describes; once all of a unit's pieces exist, they are
merged into the unit and deleted. The unit's example map and its model's identical-maps record are claimed and
cached the same way. Nothing here loads a model or knows the plan: the callers pass names, keys and callbacks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from faithbench.bench.store.claims import Claims
from faithbench.bench.store.examples import has_example, save_example
from faithbench.bench.store.pieces import PieceStore, merge_pieces, piece_name
from faithbench.bench.store.results import RunStore
from faithbench.io import atomic_write_text


class Piece(NamedTuple):
    """One computed piece: every metric's records on its items, its maps' state (None: maps not kept), and what
    its record carries besides (provenance, seconds, the unit's fingerprint on piece 0)."""

    records: dict
    maps: dict | None
    extra: dict[str, Any]


@dataclass(kw_only=True)
class UnitFiles:
    """A worker's file work in run folder ``out``, whose units come in ``pieces`` pieces; ``before_writing`` is
    called before each new file (the first call takes the folder over for this run)."""

    out: Path
    pieces: int
    before_writing: Callable[[], None] = lambda: None
    store: RunStore = field(init=False)
    piece_store: PieceStore = field(init=False)
    claims: Claims = field(init=False)

    def __post_init__(self) -> None:
        self.store, self.piece_store = RunStore(self.out), PieceStore(self.out)
        self.claims = Claims(self.out / "claims")

    def _writing(self) -> None:
        """Before any new file (a piece's maps, a unit, an example): the first call takes the folder over."""
        self.before_writing()

    def unit(self, model: str, job: str, key: str) -> dict | None:
        """The unit the folder holds under ``key`` (None: not there, or under another key)."""
        return self.store.load_unit(model, job, key)

    def compute_free_pieces(self, model: str, job: str, key: str, compute: Callable[[int], Piece]) -> bool:
        """Claim each piece no one holds and save ``compute(c)``; returns whether it computed any."""
        moved = False
        for c in range(self.pieces):
            if self.piece_store.has(model, job, key, c, self.pieces):
                continue
            claim = piece_name(model, job, c, self.pieces)
            if not self.claims.claim(claim):
                continue
            try:
                # finished while we looked, or merged: a merge saves the unit before it deletes the pieces, so a
                # piece gone for that reason is seen here as the unit (computing it again left it behind)
                has = self.piece_store.has(model, job, key, c, self.pieces)
                if not has and self.unit(model, job, key) is None:
                    self._writing()
                    piece = compute(c)
                    if piece.maps is not None:
                        self.store.save_maps(model, job, key, piece.maps, c)
                    self.piece_store.save(model, job, key, c, self.pieces, piece.records, **piece.extra)
                    moved = True
            finally:
                self.claims.release(claim)
        return moved

    def merge(self, model: str, job: str, key: str, head: Mapping[str, Any]) -> dict | None:
        """The unit from its pieces, if all exist (None: pieces other workers hold): ``head`` (its names, key and
        columns) then the merged records, the provenance and fingerprint of piece 0; saved, so from here on it is
        done, then its pieces deleted."""
        parts = self.piece_store.complete(model, job, key, self.pieces)
        if parts is None:
            return None
        record = {
            **head,
            "pieces": self.pieces,
            "piece_time_s": max(p.get("seconds", 0.0) for p in parts),  # the longest piece: what a worker must allow
            "provenance": parts[0]["provenance"],
            "metrics": merge_pieces(parts),
            "fingerprint": parts[0].get("fingerprint"),
        }
        self._writing()
        self.store.save_unit(record)
        for c in range(self.pieces):  # the unit holds all they held (a worker merging at the same time rereads it)
            self.piece_store.path(model, job, c, self.pieces).unlink(missing_ok=True)
        return record

    def example(self, model: str, job: str, key: str, draw: Callable[[], Any]) -> None:
        """The unit's example map ``draw()`` for the report's panel, if missing (claimed: one worker draws it)."""
        if has_example(self.out, model, job, key):
            return
        claim = f"{model}__{job}.example"
        if not self.claims.claim(claim):
            return
        try:
            self._writing()
            save_example(self.out, model, job, key, draw())
        finally:
            self.claims.release(claim)

    def identity_path(self, model: str) -> Path:
        return self.out / "identical" / f"{model}.json"

    def _identities(self, model: str, keys: list[str]) -> list[dict] | None:
        try:
            record = json.loads(self.identity_path(model).read_text())
        except (OSError, ValueError):
            return None
        return record.get("pairs", []) if isinstance(record, dict) and record.get("keys") == keys else None

    def identities(self, model: str, keys: list[str], find: Callable[[], list[dict]]) -> list[dict]:
        """Model ``model``'s method pairs with identical maps for its units' ``keys`` (sorted): as saved for the
        same keys, else ``find()``, saved."""
        found = self._identities(model, keys)
        if found is None:
            found = find()
            self.identity_path(model).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.identity_path(model), json.dumps({"keys": keys, "pairs": found}))
        return found

    def identical(self, keys: Mapping[str, list[str]]) -> list[dict]:
        """The saved pairs of each model in ``keys`` (model -> its done units' sorted keys) whose record is of
        those keys, in the mapping's order."""
        return [pair for model, ks in keys.items() for pair in self._identities(model, ks) or []]

    def close(self) -> None:
        self.claims.close()
