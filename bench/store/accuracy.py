"""run.json's record of a model's held-out accuracy on the run's data (``models[name]["run_accuracy"]``: ``correct``,
``n``, ``chance``, ``data``), and the floor a model must exceed to count as above chance."""

from __future__ import annotations

import math

FLOOR_SE = 3.0  # a model is above chance when it beats the best constant guess by this many standard errors


def accuracy_floor(chance: float, n: int) -> float:
    """The accuracy a model must exceed on ``n`` items to be above chance: the best constant guess's (``chance``, the
    share of the most frequent label among the items) plus :data:`FLOOR_SE` binomial standard errors of it."""
    return chance + FLOOR_SE * math.sqrt(chance * (1 - chance) / max(n, 1))


def run_accuracy(record: dict | None) -> dict[str, dict]:
    """Model name -> its ``run_accuracy`` record, from a run.json (None or none recorded: empty)."""
    models = (record or {}).get("models") or {}
    return {
        m: info["run_accuracy"] for m, info in models.items() if isinstance(info, dict) and info.get("run_accuracy")
    }
