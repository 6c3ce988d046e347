"""SeqPG test sequences: segments of distinct classes, truncated to a fixed length and concatenated."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.metrics._checks import check_positive_int, check_tensor
from faithbench.metrics._selection import draw_distinct_classes

#: B-cos LM segment lengths per data set: the seed code's max_length, [CLS] and [SEP] included (``segment_length``
#: counts content tokens: max_length - 2).
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
