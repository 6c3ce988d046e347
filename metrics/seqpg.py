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

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from attributions.windows import explain_in_chunks
from faithbench.config import to_dict
from metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from metrics._share import target_share
from metrics.sequences import SEGMENT_LENGTHS, SequenceSet, build_sequences, truncate_segments
from metrics.spec import MetricResult, MetricSpec, Unit
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


# --------------------------------------------------------------------------- the suite's metric


@dataclass(frozen=True)
class SeqPGConfig:
    """``[seqpg]``: how the sequences are built (defaults: the issue's 2 segments of 20 tokens; B-cos LM's 0.75
    confidence and seed 42) and scored."""

    n_segments: int = 2
    segment_length: int = 20  # content tokens per segment ([CLS] / [SEP] not counted)
    min_confidence: float = 0.75  # each truncated segment alone must be classified correctly with this confidence
    n_sequences: int = 100  # at most this many sequences (fewer when the classes run out)
    seed: int = 42
    zero_mass: str = "zero"

    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for key in ("n_segments", "segment_length", "n_sequences"):
            check_positive_int(getattr(self, key), key)
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be a probability in [0, 1], got {self.min_confidence}")
        check_choice(self.zero_mass, "zero_mass rule", ("zero", "nan"))


@dataclass(frozen=True)
class PreparedSequences:
    """A model's SeqPG sequences (shared by its methods): encoded inputs, segment ids and labels on the device."""

    inputs: Tensor  # (N, D, S * L + 2): [CLS] segments [SEP]
    segment_ids: Tensor  # (N, S * L + 2), -1 at [CLS] / [SEP]
    labels: Tensor  # (N, S)
    info: dict[str, Any]


def prepare_sequences(unit: Unit, cfg: SeqPGConfig) -> PreparedSequences:
    """Segments: the first ``segment_length`` tokens of every evaluation text that long, kept where the model
    classifies the segment alone (as ``[CLS] segment [SEP]``) correctly with ``min_confidence``."""
    model, ids, length = unit.model, unit.images, cfg.segment_length
    vocab = model.encoding.vocab  # a text model's TokenEncoding
    long_enough = (model.feature_mask(ids).sum(dim=1) >= length).nonzero().flatten()
    segments, labels = ids[long_enough, 1 : 1 + length], unit.labels[long_enough]  # rows are [CLS] tokens [SEP] ...

    def wrap(tokens: Tensor) -> Tensor:
        n = tokens.shape[0]
        return torch.cat([tokens.new_full((n, 1), vocab.cls), tokens, tokens.new_full((n, 1), vocab.sep)], dim=1)

    info: dict[str, Any] = {**to_dict(cfg), "n_long_enough": len(long_enough), "n_confident": 0}

    def none_built(why: str) -> PreparedSequences:
        print(f"[faithbench] no SeqPG sequence for {model.name}: {why}", file=sys.stderr)
        empty = torch.empty(0, cfg.n_segments * length + 2, dtype=torch.long)
        return PreparedSequences(torch.empty(0), empty, empty[:, : cfg.n_segments], {**info, "n_sequences_built": 0})

    if len(long_enough) == 0:
        return none_built(f"no evaluation text has {length} tokens; choose a shorter segment_length")
    probs = model.probabilities(model.predict_logits(wrap(segments), unit.eval_batch, unit.device))
    confidence = probs.gather(1, labels.view(-1, 1)).squeeze(1)
    correct = probs.argmax(dim=1) == labels
    info["n_confident"] = int((correct & (confidence >= cfg.min_confidence)).sum())
    try:
        seq = build_sequences(
            segments,
            labels,
            confidence,
            correct,
            n_segments=cfg.n_segments,
            n_sequences=cfg.n_sequences,
            min_confidence=cfg.min_confidence,
            seed=cfg.seed,
        )
    except ValueError as exc:
        return none_built(str(exc))
    outside = torch.full((len(seq.tokens), 1), -1, dtype=torch.long)
    return PreparedSequences(
        model.encode(wrap(seq.tokens)).to(unit.device),
        torch.cat([outside, seq.segment_ids, outside], dim=1).to(unit.device),
        seq.segment_labels.to(unit.device),
        {**info, "n_sequences_built": len(seq.tokens)},
    )


def evaluate(unit: Unit, cfg: SeqPGConfig) -> MetricResult:
    """Every segment of this shard's sequences, its class explained on the whole sequence; ids = sequence * S + s."""
    prep = unit.per_model(("seqpg", cfg), lambda: prepare_sequences(unit, cfg))
    s = cfg.n_segments
    g = unit.take(len(prep.labels)).to(prep.labels.device)
    if len(g) == 0:
        return MetricResult.empty(prep.info, "seqpg")
    job = g.repeat_interleave(s)
    targets = torch.arange(s, device=g.device).repeat(len(g))
    if unit.method.capabilities.ground_truth:  # the oracle control: the explained segment itself
        truth = prep.segment_ids[job] == targets[:, None]
        maps = unit.timed_explanation("seqpg", lambda: unit.method.from_truth(truth))
    else:
        maps = unit.timed_explanation(
            "seqpg",
            lambda: explain_in_chunks(
                unit.explain, lambda sl: prep.inputs[job[sl]], prep.labels[g].reshape(-1), unit.explain_batch
            ),
        )
    scores = sequence_pointing_game(maps, prep.segment_ids[job], targets, n_segments=s, zero_mass=cfg.zero_mass)
    return MetricResult(scores.values, scores.undefined, job * s + targets, prep.info, "seqpg")


SPEC = MetricSpec(
    name="seqpg",
    description="sequence pointing game: positive-attribution share of the explained segment",
    higher_is_better=True,
    modalities=("text",),
    scale=100,
    unit="%",
    evaluate=evaluate,
    config=SeqPGConfig,
    table="seqpg",
    plot="bar",
    ground_truth=True,
)

__all__ = [
    "SEGMENT_LENGTHS",
    "SPEC",
    "SeqPGConfig",
    "SequenceSet",
    "build_sequences",
    "sequence_pointing_game",
    "truncate_segments",
]
