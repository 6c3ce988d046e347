"""Items shared across models: a metric whose items are chosen per model (grids of images a model classifies
correctly, text segments it is sure of) can instead choose them once for every model of a comparison.

A metric opts in through its spec: ``pairing(config, suite_models)`` names the models that decide (none: each
model chooses its own), ``eligibility(model, images, labels, config, device, batch)`` gives one model's
per-item (eligible, score). The shared items are those every deciding model finds eligible, scored by the
models' mean score; each model then draws its items from them with its own rule (so models of one geometry get
the same grids). The result joins every unit's key (by digest), the run folder (``shared.pt``, for
``rescore``) and ``run.json`` (which models decided, their weights, how many items were eligible).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from faithbench.bench.run.plan import MetricJob, Plan
from faithbench.build_names import split_build
from faithbench.io import atomic_torch_save
from faithbench.models.adapter import ModelAdapter
from faithbench.models.data.datasets import EvalData

SHARED_FILE = "shared.pt"


@dataclass(frozen=True)
class SharedItems:
    """One metric's items shared by ``models``: ``eligible`` (M,) bool and ``score`` (M,) float64, on the host."""

    models: tuple[str, ...]
    eligible: Tensor
    score: Tensor
    weights: dict[str, str]

    def digest(self) -> str:
        h = hashlib.sha256(",".join(self.models).encode())
        h.update(self.eligible.numpy().tobytes())
        h.update(self.score.numpy().tobytes())
        return h.hexdigest()

    def record(self) -> dict[str, Any]:
        return {
            "models": list(self.models),
            "weights_sha256": self.weights,
            "n_items": len(self.eligible),
            "n_eligible": int(self.eligible.sum()),
            "digest": self.digest(),
        }


def share_items(
    plan: Plan,
    data: EvalData,
    device: torch.device,
    load: Callable[[str], ModelAdapter],
    batch: int,
) -> dict[str, SharedItems]:
    """The shared items of every metric of the plan that shares them (loading each deciding model once; ``batch``:
    inputs per model call at most)."""
    wanted: dict[str, tuple[str, ...]] = {}  # the shared items' key (METRIC, or METRIC@K by build) -> its deciders
    metrics: dict[str, MetricJob] = {}
    for metric in plan.metrics:
        for key, models in metric.groups().items():
            wanted[key], metrics[key] = models, metric
    parts: dict[str, list[tuple[Tensor, Tensor]]] = {name: [] for name in wanted}
    weights: dict[str, str] = {}
    for model_name in dict.fromkeys(m for models in wanted.values() for m in models):
        model = load(model_name)
        weights[model_name] = model.weights_sha256
        for name, models in wanted.items():
            if model_name in models:
                eligible, score = metrics[name].spec.eligibility(
                    model, data.images, data.labels, metrics[name].config, device, batch
                )
                parts[name].append((eligible.cpu().bool(), score.detach().cpu().double()))
        del model
    return {
        name: SharedItems(
            models,
            torch.stack([e for e, _ in parts[name]]).all(dim=0),
            torch.stack([s for _, s in parts[name]]).mean(dim=0),
            {m: weights[m] for m in models},
        )
        for name, models in wanted.items()
    }


def items_of(shared: dict[str, Any], model_name: str) -> dict[str, Any]:
    """What ``model_name``'s units read of the run's shared items, by metric name: per metric the group the model
    decided in (its build's under ``shared-by-build``), else the metric's one group."""
    out: dict[str, Any] = {}
    for key, items in shared.items():
        metric = split_build(key)[0]
        if getattr(items, "models", None) is not None and model_name in items.models:
            out[metric] = items
        else:
            out.setdefault(metric, items)
    return out


def shared_digest(shared: dict[str, SharedItems]) -> str:
    """One digest of all shared items ("" when none: unit keys stay those of unpaired runs)."""
    return "|".join(f"{name}:{shared[name].digest()}" for name in sorted(shared))


def save_shared(out: Path, shared: dict[str, SharedItems]) -> None:
    if shared:
        state = {n: {"models": list(s.models), "eligible": s.eligible, "score": s.score, "weights": s.weights}
                 for n, s in shared.items()}  # fmt: skip
        atomic_torch_save(out / SHARED_FILE, state)


def load_shared(run_dir: Path) -> dict[str, SharedItems]:
    """A run's shared items ({} for a run without them)."""
    path = Path(run_dir) / SHARED_FILE
    if not path.is_file():
        return {}
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {n: SharedItems(tuple(s["models"]), s["eligible"], s["score"], dict(s["weights"])) for n, s in state.items()}
