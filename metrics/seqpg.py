"""SeqPG, the sequence pointing game (B-cos LM Sec. 4, App. E/F): GridPG for text.

A synthetic sequence concatenates S segments taken from examples of distinct classes, each
truncated to a fixed length (B-cos LM: 50 / 256 / 25 tokens for AG News / IMDB / HateXplain).
Segment s's class is explained on the whole sequence and scored by the share of positive
attribution that lands inside segment s:

    SeqPG_s = sum_{t in segment s} max(a_t, 0) / sum_{t in any segment} max(a_t, 0)

Special and padding tokens belong to no segment and are left out of both sums. A class-agnostic
(uniform) map scores 1/S.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from metrics._selection import draw_distinct_classes
from metrics._share import target_share
from metrics.types import Scores

#: B-cos LM segment lengths per data set.
SEGMENT_LENGTHS = {"ag_news": 50, "imdb": 256, "hatexplain": 25}


def truncate_segments(token_ids: Sequence[Sequence[int]], length: int) -> tuple[Tensor, Tensor]:
    """First ``length`` tokens of every example at least that long -> ((M', length), kept indices (M',)).

    Shorter examples are dropped (B-cos LM keeps only examples that need no padding).
    """
    check_positive_int(length, "segment length")
    kept = [i for i, ids in enumerate(token_ids) if len(ids) >= length]
    if not kept:
        raise ValueError(f"no example has at least {length} tokens; choose a shorter segment length")
    segments = torch.tensor([list(token_ids[i][:length]) for i in kept], dtype=torch.long)
    return segments, torch.tensor(kept, dtype=torch.long)


@dataclass(frozen=True)
class SequenceSet:
    """Synthetic SeqPG sequences.

    Attributes:
        tokens: (N, S * L) concatenated segment tokens (no special tokens: the model adapter adds them).
        segment_ids: (N, S * L) segment index of every position.
        segment_labels: (N, S) class of each segment (the explained targets).
        sources: (N, S) index of the example each segment came from.
    """

    tokens: Tensor
    segment_ids: Tensor
    segment_labels: Tensor
    sources: Tensor


def build_sequences(
    segments: Tensor,
    labels: Tensor,
    confidence: Tensor,
    correct: Tensor,
    *,
    n_segments: int = 2,
    n_sequences: int | None = None,
    min_confidence: float = 0.75,
    seed: int = 42,
) -> SequenceSet:
    """Concatenate segments of distinct classes into SeqPG sequences.

    Only segments the model classifies ``correct``ly with ``confidence >= min_confidence`` (both
    measured on the truncated segment alone) are used. Per class they are queued by confidence,
    descending; each sequence draws ``n_segments`` distinct classes in random order (seeded) and
    takes each class's next segment, until fewer than ``n_segments`` classes remain or
    ``n_sequences`` are built.
    """
    check_tensor(segments, "segments", min_dim=2)
    m, length = segments.shape
    for name, t in (("labels", labels), ("confidence", confidence), ("correct", correct)):
        if t.shape != (m,):
            raise ValueError(f"{name} must have shape ({m},) to match segments, got {tuple(t.shape)}")
    check_positive_int(n_segments, "n_segments")
    eligible = correct.bool() & (confidence >= min_confidence)
    sources = draw_distinct_classes(labels, confidence, eligible, per_block=n_segments, n_blocks=n_sequences, seed=seed)
    if sources.shape[0] == 0:
        raise ValueError(
            f"no sequence can be built: fewer than {n_segments} classes have correctly classified "
            f"segments with confidence >= {min_confidence}"
        )
    sources = sources.to(segments.device)
    n = sources.shape[0]
    seg_ids = torch.arange(n_segments, device=segments.device).repeat_interleave(length)
    return SequenceSet(
        tokens=segments[sources].reshape(n, n_segments * length),
        segment_ids=seg_ids.expand(n, -1).clone(),
        segment_labels=labels.to(segments.device)[sources],
        sources=sources,
    )


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
