"""Tripwire for methods that silently compute the same maps: a fingerprint per unit, pairs per model.

Every unit of a model explains the same per-sample images. A unit's fingerprint is its maps of the
first ``FINGERPRINT_IMAGES`` of them for their labels (at most ``FINGERPRINT_VALUES`` evenly spaced
values per map, float32), saved in the unit's file so that a resumed run still compares it. Two
methods of a model are flagged when their fingerprints agree::

    max |a - b| <= RTOL * max(max |a|, max |b|)        (over all fingerprint values; RTOL = 1e-5)

A flagged pair is labelled ``expected`` when a known identity explains it
(:data:`faithbench.attributions.identities.KNOWN_IDENTITIES`, with its reason), else ``unexpected``: a method
that has silently become another one, to be fixed or refused. The pairs of a run are written to
``identical_maps.json`` and listed by the report.
"""

from __future__ import annotations

import base64
from itertools import combinations
from typing import Any

import numpy as np
import torch
from torch import Tensor

from faithbench.attributions.identities import known_identity
from faithbench.bench.store.identity import FINGERPRINT_IMAGES, FINGERPRINT_VALUES, RTOL
from faithbench.bench.store.tidy import job_columns
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter


def fingerprint(unit: Unit) -> dict[str, Any] | None:
    """The unit's maps of the first per-sample images, as compact JSON (base64 float32); None for the oracle
    (it has maps only inside a metric with a ground truth)."""
    if unit.method.capabilities.ground_truth:
        return None
    ids = unit.sample_ids[:FINGERPRINT_IMAGES]
    cached = unit.cache.get(("explanation", "samples"))  # Unit.sample_maps' label maps, if a metric made them
    if cached is not None and unit.world == 1:
        maps = cached[: len(ids)]
    else:  # not explained yet, or sharded: rank 0 explains the global first images itself
        x = unit.model.encode(unit.images[ids]).to(unit.device)
        maps = unit.explain(x, unit.labels[ids].to(unit.device))
    flat = maps.detach().float().cpu().reshape(len(ids), -1)
    if flat.shape[1] > FINGERPRINT_VALUES:
        flat = flat[:, torch.linspace(0, flat.shape[1] - 1, FINGERPRINT_VALUES).round().long()]
    raw = flat.numpy().astype("<f4").tobytes()
    return {"sample_ids": ids.tolist(), "shape": list(flat.shape), "float32": base64.b64encode(raw).decode()}


def decode(fp: dict[str, Any]) -> Tensor:
    values = np.frombuffer(base64.b64decode(fp["float32"]), dtype="<f4")
    return torch.from_numpy(values.copy()).view(*fp["shape"])


def relative_difference(a: Tensor, b: Tensor) -> float:
    """max |a - b| / max(max |a|, max |b|); 0 for two all-zero fingerprints (identical too)."""
    scale = float(torch.maximum(a.abs().max(), b.abs().max()))
    diff = float((a - b).abs().max())
    return 0.0 if diff == 0 else diff / scale if scale > 0 else float("inf")


def identical_pairs(model: ModelAdapter, units: list[dict]) -> list[dict[str, Any]]:
    """The flagged method pairs among ``units`` (finished units of ``model``, in suite order)."""
    prints = {  # reruns of a seeded method with another seed (lime@seed1) are not methods of their own
        u["method"]: (u["fingerprint"], u["method_params"])
        for u in units
        if u.get("fingerprint") and not job_columns(u)["rerun_of"]
    }
    pairs = []
    for a, b in combinations(prints, 2):
        (fa, pa), (fb, pb) = prints[a], prints[b]
        if fa["sample_ids"] != fb["sample_ids"] or fa["shape"] != fb["shape"]:
            continue  # units from runs with other samples: nothing to compare
        rel = relative_difference(decode(fa), decode(fb))
        if rel <= RTOL:
            reason = known_identity(model, {a: pa, b: pb})
            pairs.append(
                {
                    "model": units[0]["model"],
                    "methods": [a, b],
                    "max_rel_diff": rel,
                    "images": len(fa["sample_ids"]),
                    "status": "expected" if reason else "unexpected",
                    "reason": reason or "",
                }
            )
    return pairs
