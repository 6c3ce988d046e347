"""How a classifier's logits become class probabilities (one place for models and metrics)."""

from __future__ import annotations

from torch import Tensor

from faithbench.errors import check_choice

ACTIVATIONS = ("softmax", "sigmoid", "identity")


def to_probabilities(logits: Tensor, activation: str) -> Tensor:
    """``softmax`` over classes (standard models), ``sigmoid`` per class (B-cos models trained with
    BCE), or ``identity`` (the scores already are probabilities)."""
    check_choice(activation, "activation", ACTIVATIONS)
    if activation == "softmax":
        return logits.softmax(dim=-1)
    if activation == "sigmoid":
        return logits.sigmoid()
    return logits
