"""Result containers: the metric functions' per-sample scores (on the input's device) and the hooks' results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
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


@dataclass(frozen=True, kw_only=True)
class MetricResult:
    """Per-sample raw scores of one metric on this process's shard.

    ``sample_ids`` identify the samples across runs (image ids, or grid * cells + cell for GridPG);
    ``params`` are recorded with every result row; ``explained`` names the explanation whose time
    is reported (a key of :attr:`Unit.explain_time`).
    """

    values: Tensor
    undefined: Tensor
    sample_ids: Tensor
    params: dict[str, Any]
    explained: str
    curve: Tensor | None = None
    fractions: Tensor | None = None

    @classmethod
    def empty(cls, params: dict[str, Any], explained: str) -> MetricResult:
        """No sample on this shard (more processes than samples, or zero GridPG grids)."""
        none = torch.empty(0)
        return cls(values=none, undefined=none.bool(), sample_ids=none.long(), params=params, explained=explained)

    @classmethod
    def from_curve(
        cls, scores: CurveScores, *, sample_ids: Tensor, params: dict[str, Any], explained: str = "samples"
    ) -> MetricResult:
        """The result of a curve metric: its per-sample summary, undefined marks, curve and fractions."""
        return cls(
            values=scores.values,
            undefined=scores.undefined,
            sample_ids=sample_ids,
            params=params,
            explained=explained,
            curve=scores.curve,
            fractions=scores.fractions,
        )


@dataclass(frozen=True)
class Example:
    """One explanation shown in the report's panel: a (c, H, W) image in [0, 1] and its (H, W) map."""

    image: Tensor
    attribution: Tensor
    label: int
    caption: str
