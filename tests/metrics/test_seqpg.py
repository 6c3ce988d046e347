"""SeqPG: hand-computed scores, special tokens, zero mass, sequence building."""

import math

import pytest
import torch

from faithbench.metrics.seqpg import SEGMENT_LENGTHS, build_sequences, sequence_pointing_game, truncate_segments


def test_share_by_hand_ignores_special_tokens_and_negatives():
    attr = torch.tensor([[5.0, 1, 1, 0, 1, -3, 0, 9]])
    seg = torch.tensor([[-1, 0, 0, 0, 1, 1, 1, -1]])
    s = sequence_pointing_game(attr, seg, torch.tensor([0]))
    assert s.values.item() == pytest.approx(2 / 3)
    s = sequence_pointing_game(attr, seg, torch.tensor([1]))
    assert s.values.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("segments", [2, 3, 4])
def test_uniform_map_scores_one_over_the_number_of_segments(segments):
    seg = torch.arange(segments).repeat_interleave(5).unsqueeze(0)
    s = sequence_pointing_game(torch.ones(1, 5 * segments), seg, torch.tensor([segments - 1]))
    assert s.values.item() == pytest.approx(1 / segments)


def test_zero_mass_is_flagged():
    seg = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]])
    attr = torch.tensor([[-1.0, -1, -1, -1], [1.0, 0, 0, 0]])
    s = sequence_pointing_game(attr, seg, torch.tensor([0, 0]))
    assert s.values.tolist() == [0.0, 1.0] and s.undefined.tolist() == [True, False]
    s = sequence_pointing_game(attr, seg, torch.tensor([0, 0]), zero_mass="nan")
    assert math.isnan(s.values[0].item())


def test_bad_inputs():
    with pytest.raises(ValueError, match="must match attributions"):
        sequence_pointing_game(torch.ones(1, 4), torch.zeros(1, 3, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError, match="segment ids must be"):
        sequence_pointing_game(torch.ones(1, 2), torch.tensor([[0, 1]]), torch.tensor([2]))
    with pytest.raises(ValueError, match="NaN/inf"):
        sequence_pointing_game(torch.tensor([[float("nan"), 1.0]]), torch.tensor([[0, 1]]), torch.tensor([0]))


def test_truncate_segments_drops_short_examples():
    seg, kept = truncate_segments([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 3)
    assert seg.tolist() == [[1, 2, 3], [6, 7, 8]] and kept.tolist() == [0, 2]
    with pytest.raises(ValueError, match="at least 5 tokens"):
        truncate_segments([[1, 2]], 5)
    assert SEGMENT_LENGTHS == {"ag_news": 50, "imdb": 256, "hatexplain": 25}


def test_build_sequences_uses_confident_correct_segments_of_distinct_classes():
    m, length = 40, 3
    labels = torch.arange(4).repeat(10)
    segments = torch.arange(m).unsqueeze(1) * 10 + torch.arange(length)
    confidence = torch.linspace(0.5, 1.0, m)
    correct = torch.ones(m, dtype=torch.bool)
    correct[-1] = False
    out = build_sequences(segments, labels, confidence, correct, n_segments=2, seed=3)
    used = out.sources.flatten()
    assert ((confidence[used] >= 0.75) & correct[used]).all()
    assert len(set(used.tolist())) == used.numel()
    assert (out.segment_labels[:, 0] != out.segment_labels[:, 1]).all()
    assert out.tokens.shape == (out.sources.shape[0], 2 * length)
    assert torch.equal(out.tokens[:, :length], segments[out.sources[:, 0]])
    assert out.segment_ids[0].tolist() == [0, 0, 0, 1, 1, 1]
    again = build_sequences(segments, labels, confidence, correct, n_segments=2, seed=3)
    assert torch.equal(out.sources, again.sources)
    three = build_sequences(segments, labels, confidence, correct, n_segments=3, n_sequences=2)
    assert three.tokens.shape == (2, 9)
    with pytest.raises(ValueError, match="no sequence can be built"):
        build_sequences(segments, labels, confidence, correct, min_confidence=2.0)
