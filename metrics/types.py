"""Result containers returned by the metric functions (per-sample, on the input's device)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass(frozen=True)
class Scores:
    """Per-sample scores.

    ``values`` holds one score per sample (NaN where the protocol drops a sample).
    ``undefined`` is a bool tensor of the same shape marking samples whose formula is undefined
    (zero positive mass, an all-zero map); these are reported and counted, never hidden, whatever
    value the protocol assigns them.
    """

    values: Tensor
    undefined: Tensor

    @property
    def n_undefined(self) -> int:
        return int(self.undefined.sum())


@dataclass(frozen=True)
class CurveScores(Scores):
    """Per-sample summary ``values`` plus the per-sample ``curve`` (B, R) at ``fractions`` (R,)."""

    curve: Tensor
    fractions: Tensor


@dataclass(frozen=True)
class ErasureScores:
    """Comprehensiveness and sufficiency of the same explanations, each with its curve."""

    comprehensiveness: CurveScores
    sufficiency: CurveScores
    original_probability: Tensor
