"""SeqPG, the sequence pointing game (B-cos LM Sec. 4, App. E/F): GridPG for text.

A synthetic sequence concatenates S segments taken from examples of distinct classes, each
truncated to a fixed length (B-cos LM: 50 / 256 / 25 tokens for AG News / IMDB / HateXplain).
Segment s's class is explained on the whole sequence and scored by the share of positive
attribution that lands inside segment s:

    SeqPG_s = sum_{t in segment s} max(a_t, 0) / sum_{t in any segment} max(a_t, 0)

Special and padding tokens belong to no segment and are left out of both sums. A class-agnostic
(uniform) map scores 1/S. Sequences are built in :mod:`faithbench.metrics.sequences`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from faithbench.config import to_dict
from faithbench.errors import UserError
from faithbench.metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from faithbench.metrics._share import target_share
from faithbench.metrics.sequences import SEGMENT_LENGTHS, SequenceSet, build_sequences, truncate_segments
from faithbench.metrics.spec import MetricCost, MetricResult, Unit
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores
from faithbench.metrics.windows import explain_in_chunks

if TYPE_CHECKING:
    from faithbench.models.adapter import ModelAdapter

INPUT_FORMATS = ("sentence-pair", "concatenated")
PER_MODEL = "per-model"  # sequences_from: each model chooses its own sequences


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

    Example:
        >>> import torch
        >>> from faithbench.metrics import sequence_pointing_game
        >>> maps = torch.tensor([[1.0, 3.0, -2.0, 1.0]])  # four tokens, two segments
        >>> segments = torch.tensor([[0, 0, 1, 1]])
        >>> sequence_pointing_game(maps, segments, torch.tensor([0])).values  # positive mass in segment 0: 4 of 5
        tensor([0.8000])
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
    confidence and seed 42) and scored.

    ``sequences_from``: the model whose predictions choose the segments. B-cos LM builds them once with the
    conventional model and reuses them for every model (App. E), so the default (empty) is the suite's first
    conventional (``standard``) model, and a suite without one must name the deciding model (which need not be
    one of its models) or ask for ``per-model`` (each model chooses its own sequences, the protocol B-cos LM
    rules out for comparisons across models). ``input_format``: ``sentence-pair`` (the seed code's ``[CLS] s1 [SEP] s2
    [SEP]``) or ``concatenated`` (``[CLS] s1 s2 [SEP]``)."""

    n_segments: int = 2
    segment_length: int = 20  # content tokens per segment ([CLS] / [SEP] not counted)
    min_confidence: float = 0.75  # each truncated segment alone must be classified correctly with this confidence
    n_sequences: int = 100  # at most this many sequences (fewer when the classes run out)
    seed: int = 42
    zero_mass: str = "zero"
    sequences_from: str = ""
    input_format: str = "sentence-pair"

    cli: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for key in ("n_segments", "segment_length", "n_sequences"):
            check_positive_int(getattr(self, key), key)
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be a probability in [0, 1], got {self.min_confidence}")
        check_choice(self.zero_mass, "zero_mass rule", ("zero", "nan"))
        check_choice(self.input_format, "input_format", INPUT_FORMATS)


@dataclass(frozen=True)
class PreparedSequences:
    """A model's SeqPG sequences (shared by its methods): encoded inputs, segment ids and labels on the device."""

    inputs: Tensor  # (N, D, S * L + 2): [CLS] segments [SEP]
    segment_ids: Tensor  # (N, S * L + 2), -1 at [CLS] / [SEP]
    labels: Tensor  # (N, S)
    info: dict[str, Any]


def _segments(model: ModelAdapter, ids: Tensor, labels: Tensor, length: int) -> tuple[Tensor, Tensor, Tensor]:
    """(segments (M', L), their labels, the texts they came from): the first ``length`` tokens of every text
    that long (rows are ``[CLS] tokens [SEP] pad``)."""
    long_enough = (model.feature_mask(ids).sum(dim=1) >= length).nonzero().flatten()
    return ids[long_enough, 1 : 1 + length], labels[long_enough], long_enough


def _wrap(vocab: Any, tokens: Tensor) -> Tensor:
    """``[CLS] segment [SEP]`` rows."""
    n = tokens.shape[0]
    return torch.cat([tokens.new_full((n, 1), vocab.cls), tokens, tokens.new_full((n, 1), vocab.sep)], dim=1)


def segment_confidence(model: ModelAdapter, ids: Tensor, labels: Tensor, cfg: SeqPGConfig, device: Any, batch: int):
    """Every evaluation text's (eligible (M,), confidence (M,)): its truncated segment alone (``[CLS] segment
    [SEP]``) is long enough and classified correctly with ``min_confidence``; confidence = p(label)."""
    segments, labels_kept, kept = _segments(model, ids, labels, cfg.segment_length)
    eligible = torch.zeros(len(ids), dtype=torch.bool)
    confidence = torch.zeros(len(ids), dtype=torch.float64)
    if len(kept):
        probs = model.probabilities(model.predict_logits(_wrap(model.encoding.vocab, segments), batch, device))
        p = probs.gather(1, labels_kept.view(-1, 1).to(probs.device)).squeeze(1).double().cpu()
        correct = (probs.argmax(dim=1).cpu() == labels_kept) & (p >= cfg.min_confidence)
        eligible[kept], confidence[kept] = correct, p
    return eligible, confidence


def _inputs(vocab: Any, seq: SequenceSet, n_segments: int, length: int, fmt: str) -> tuple[Tensor, Tensor]:
    """Token ids and segment ids (-1 outside every segment) of the sequences in ``fmt``."""
    n = len(seq.tokens)
    cls, sep = seq.tokens.new_full((n, 1), vocab.cls), seq.tokens.new_full((n, 1), vocab.sep)
    outside = torch.full((n, 1), -1, dtype=torch.long)
    if fmt == "concatenated":
        return torch.cat([cls, seq.tokens, sep], 1), torch.cat([outside, seq.segment_ids, outside], 1)
    tokens, segment_ids = [cls], [outside]
    for k in range(n_segments):
        part = slice(k * length, (k + 1) * length)
        tokens += [seq.tokens[:, part], sep]
        segment_ids += [seq.segment_ids[:, part], outside]
    return torch.cat(tokens, 1), torch.cat(segment_ids, 1)


def prepare_sequences(unit: Unit, cfg: SeqPGConfig) -> PreparedSequences:
    """Segments: the first ``segment_length`` tokens of every evaluation text that long, kept where the deciding
    model (``sequences_from``, else this one) classifies the segment alone correctly with ``min_confidence``."""
    model, length = unit.model, cfg.segment_length
    vocab = model.encoding.vocab  # a text model's TokenEncoding
    shared = unit.shared.get("seqpg")
    segments, labels, kept = _segments(model, unit.images, unit.labels, length)
    info: dict[str, Any] = {
        **to_dict(cfg),
        "n_long_enough": len(kept),
        "n_confident": 0,
        "sequences_from": ",".join(shared.models) if shared is not None else PER_MODEL,
        "cluster_size": 1,
    }

    def none_built(why: str) -> PreparedSequences:
        print(f"[faithbench] no SeqPG sequence for {model.name}: {why}", file=sys.stderr)
        pair = cfg.input_format == "sentence-pair"  # [CLS] s1 [SEP] s2 [SEP] vs [CLS] s1 s2 [SEP]
        width = cfg.n_segments * length + (cfg.n_segments + 1 if pair else 2)
        empty = torch.empty(0, width, dtype=torch.long)
        return PreparedSequences(torch.empty(0), empty, empty[:, : cfg.n_segments], {**info, "n_sequences_built": 0})

    if len(kept) == 0:
        return none_built(f"no evaluation text has {length} tokens; choose a shorter segment_length")
    if shared is None:
        eligible, confidence = segment_confidence(model, unit.images, unit.labels, cfg, unit.device, unit.eval_batch)
    else:
        eligible, confidence = shared.eligible, shared.score
    eligible, confidence = eligible[kept], confidence[kept]
    info["n_confident"] = int(eligible.sum())
    try:
        seq = build_sequences(
            segments,
            labels,
            confidence,
            eligible,
            n_segments=cfg.n_segments,
            n_sequences=cfg.n_sequences,
            min_confidence=0.0,  # eligible already holds the confidence rule (of the deciding model)
            seed=cfg.seed,
        )
    except ValueError as exc:
        return none_built(str(exc))
    tokens, segment_ids = _inputs(vocab, seq, cfg.n_segments, length, cfg.input_format)
    return PreparedSequences(
        model.encode(tokens).to(unit.device),
        segment_ids.to(unit.device),
        seq.segment_labels.to(unit.device),
        {**info, "n_sequences_built": len(seq.tokens)},
    )


def pairing_models(cfg: SeqPGConfig, suite_models: Mapping[str, str]) -> tuple[str, ...]:
    """The model whose predictions choose every model's segments: ``sequences_from``, by default the suite's
    first conventional model (``suite_models``: name -> family), none under ``per-model``."""
    if cfg.sequences_from == PER_MODEL:
        return ()
    if cfg.sequences_from:
        return (cfg.sequences_from,)
    conventional = [name for name, family in suite_models.items() if family == "standard"]
    if not conventional:
        raise UserError(
            f"[seqpg] needs a conventional model to choose the sequences every model is scored on (B-cos LM App. "
            f"E), and the suite's models ({', '.join(suite_models)}) are all B-cos: name one with [seqpg] "
            f'sequences_from = "MODEL" (it need not be in the suite), or set sequences_from = "{PER_MODEL}"'
        )
    return (conventional[0],)


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
    return MetricResult(
        values=scores.values,
        undefined=scores.undefined,
        sample_ids=job * s + targets,
        params=prep.info,
        explained="seqpg",
    )


def cost(unit: Unit, cfg: SeqPGConfig) -> tuple[MetricCost, ...]:
    """The model's own choice of segments unless shared (one forward per evaluation text, at most: only texts long
    enough are asked) and every segment of this piece's ``n_sequences`` (at most) explained on its sequence."""
    note = "at most: texts too short for a segment are not asked, sequences stop when the classes run out"
    explanations, s = len(unit.take(cfg.n_sequences)) * cfg.n_segments, cfg.n_segments
    work = MetricCost(("seqpg", cfg), explanations=explanations, repeats=s, note=note)
    if "seqpg" in unit.shared:
        return (work,)
    return MetricCost(("seqpg", "selection", cfg), inputs=len(unit.images), scope="model", note=note), work


SPEC = described(
    "seqpg",
    evaluate=evaluate,
    config=SeqPGConfig,
    pairing=pairing_models,
    eligibility=segment_confidence,
    cost=cost,
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
