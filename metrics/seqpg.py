"""SeqPG, the sequence pointing game (B-cos LM Sec. 4, App. E/F): GridPG for text.

A synthetic sequence concatenates S segments taken from examples of distinct classes, each
truncated to a fixed length (B-cos LM: 50 / 256 / 25 tokens for AG News / IMDB / HateXplain).
Segment s's class is explained on the whole sequence and scored by the share of positive
attribution that lands inside segment s:

    SeqPG_s = sum_{t in segment s} max(a_t, 0) / sum_{t in any segment} max(a_t, 0)

Special and padding tokens belong to no segment and are left out of both sums. A class-agnostic
(uniform) map scores 1/S. Sequences are built in :mod:`metrics.sequences`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from metrics._checks import check_choice, check_finite, check_tensor
from metrics._share import target_share
from metrics.sequences import SEGMENT_LENGTHS, SequenceSet, build_sequences, truncate_segments
from metrics.spec import MetricSpec
from metrics.types import Scores


def sequence_pointing_game(
    attributions: Tensor,
    segment_ids: Tensor,
    target_segments: Tensor,
    *,
    n_segments: int | None = None,
    zero_mass: str = "zero",
) -> Scores:
    """Share of positive attribution inside the explained segment.

    Args:
        attributions: (B, T) token attributions of the model input (special tokens included).
        segment_ids: (B, T) long, the segment of every position; -1 for special/padding tokens.
        target_segments: (B,) the segment whose class was explained.
        n_segments: number of segments (default: max segment id + 1).
        zero_mass: ``zero`` (score 0, as B-cos LM's +1e-12 denominator gives) or ``nan``;
            zero-mass samples are flagged in ``undefined`` either way.
    Returns:
        :class:`Scores` of shape (B,), values in [0, 1].
    """
    check_tensor(attributions, "attributions", min_dim=2, floating=True)
    check_finite(attributions, "attributions")
    check_choice(zero_mass, "zero_mass rule", ("zero", "nan"))
    if segment_ids.shape != attributions.shape:
        raise ValueError(f"segment_ids {tuple(segment_ids.shape)} must match attributions {tuple(attributions.shape)}")
    b = attributions.shape[0]
    if target_segments.shape != (b,):
        raise ValueError(f"target_segments must have shape ({b},), got {tuple(target_segments.shape)}")
    segment_ids = segment_ids.long()
    s = int(segment_ids.max()) + 1 if n_segments is None else n_segments
    if bool((segment_ids < -1).any() | (segment_ids >= s).any()) or bool(
        ((target_segments < 0) | (target_segments >= s)).any()
    ):
        raise ValueError(f"segment ids must be -1 (no segment) or in 0..{s - 1}")
    # Bucket s collects positions outside every segment, then is dropped.
    buckets = torch.where(segment_ids < 0, s, segment_ids)
    mass = torch.zeros(b, s + 1, dtype=attributions.dtype, device=attributions.device)
    mass.scatter_add_(1, buckets, attributions.clamp(min=0))
    share, empty = target_share(mass[:, :s], target_segments.long())
    if zero_mass == "zero":
        share = torch.where(empty, torch.zeros_like(share), share)
    return Scores(values=share, undefined=empty)


SPEC = MetricSpec(
    name="seqpg",
    description="sequence pointing game: positive-attribution share of the explained segment",
    higher_is_better=True,
    modalities=("text",),
    scale=100,
    unit="%",
    evaluate=None,
    unavailable="needs a text suite (text models and data), which faithbench does not ship yet",
)

__all__ = ["SEGMENT_LENGTHS", "SPEC", "SequenceSet", "build_sequences", "sequence_pointing_game", "truncate_segments"]
