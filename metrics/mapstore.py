"""The attribution maps a unit computed, kept so that its metrics can be re-scored without explaining again.

Every explanation a metric asks for goes through :meth:`faithbench.metrics.spec.Unit.explain`; with a store
attached, each (input, target) pair and its map is recorded under a content key: the input rounded to
1/1024 and hashed with seeded 64-bit integer weights (integer arithmetic: the same key on any device
and in any batch), the target and a tag (``model``, or the randomised copy a sanity check explains).
Replaying, the same calls are served from the store; a call the run never made raises
:class:`MissingMapsError` (a setting that changes which inputs are explained needs a new run).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor

QUANTUM = 1024.0


class MissingMapsError(LookupError):
    """A replayed explanation that the run did not store."""


def content_keys(inputs: Tensor, targets: Tensor) -> Tensor:
    """(B,) int64 keys of (input, target) pairs: device- and batch-independent."""
    flat = inputs.detach().reshape(inputs.shape[0], -1)
    gen = torch.Generator().manual_seed(flat.shape[1])
    weights = torch.randint(-(2**62), 2**62, (flat.shape[1] + 1,), generator=gen, dtype=torch.int64)
    weights = weights.to(flat.device)
    q = torch.round(flat.double() * QUANTUM).long()
    return (q * weights[:-1]).sum(dim=1) + targets.long() * weights[-1]  # wraps modulo 2^64: order-free


class MapStore:
    """Maps by (tag, key), in chunks as recorded; sorted once per shelf for vectorised lookups."""

    def __init__(self) -> None:
        self._chunks: dict[tuple[str, tuple[int, ...]], list[tuple[Tensor, Tensor]]] = defaultdict(list)
        self._sorted: dict[tuple[str, tuple[int, ...]], tuple[Tensor, Tensor]] = {}

    def __len__(self) -> int:
        return sum(len(k) for chunks in self._chunks.values() for k, _ in chunks)

    def add(self, tag: str, inputs: Tensor, targets: Tensor, maps: Tensor) -> None:
        shelf = (tag, tuple(maps.shape[1:]))
        self._chunks[shelf].append((content_keys(inputs, targets).cpu(), maps.detach().cpu()))
        self._sorted.pop(shelf, None)

    def _shelf(self, shelf: tuple[str, tuple[int, ...]]) -> tuple[Tensor, Tensor]:
        if shelf not in self._sorted:
            keys = torch.cat([k for k, _ in self._chunks[shelf]])
            maps = torch.cat([m for _, m in self._chunks[shelf]])
            order = keys.argsort()
            self._sorted[shelf] = keys[order], maps[order]
        return self._sorted[shelf]

    def lookup(self, tag: str, inputs: Tensor, targets: Tensor) -> Tensor:
        """The stored maps of these pairs, on the inputs' device; raises :class:`MissingMapsError` if any is absent."""
        wanted = content_keys(inputs, targets).cpu()
        for shelf in [s for s in self._chunks if s[0] == tag]:
            keys, maps = self._shelf(shelf)
            pos = torch.searchsorted(keys, wanted).clamp(max=len(keys) - 1)
            if bool((keys[pos] == wanted).all()):
                return maps[pos].to(inputs.device)
        raise MissingMapsError(f"{len(wanted)} explanations ({tag}) were not all stored by the run")

    def merge(self, other: MapStore) -> None:
        """Add every map of ``other`` (the shards of a distributed run)."""
        for shelf, chunks in other._chunks.items():
            self._chunks[shelf].extend(chunks)
            self._sorted.pop(shelf, None)

    def state(self) -> dict:
        """Plain tensors for ``torch.save``: per (tag, shape), the sorted keys (N,) and maps (N, *shape)."""
        shelves = []
        for shelf in self._chunks:
            keys, maps = self._shelf(shelf)
            shelves.append({"tag": shelf[0], "keys": keys, "maps": maps})
        return {"version": 1, "shelves": shelves}

    @classmethod
    def from_state(cls, state: dict) -> MapStore:
        store = cls()
        for shelf in state["shelves"]:
            store._chunks[(shelf["tag"], tuple(shelf["maps"].shape[1:]))].append((shelf["keys"], shelf["maps"]))
        return store
