"""Pixel deletion / insertion: hand-computed curves on an additive model, blocks, pairs, errors."""

import itertools

import pytest
import torch

from faithbench.metrics.deletion import ALOE_FRACTIONS, block_scores, pixel_deletion, pixel_insertion
from tests.helpers import AdditiveImageModel, small_cnn

V = torch.tensor([[4.0, 3.0], [2.0, 1.0]])
MODEL = AdditiveImageModel(V)
X = torch.ones(1, 1, 2, 2)
T = torch.tensor([0])
QUARTERS = [0.0, 0.25, 0.5, 0.75, 1.0]


def deletion(attr, **kw):
    kw.setdefault("fractions", QUARTERS)
    return pixel_deletion(MODEL, X, attr.view(1, 2, 2), T, block_size=1, activation="identity", **kw)


def insertion(attr, **kw):
    kw.setdefault("fractions", QUARTERS)
    return pixel_insertion(MODEL, X, attr.view(1, 2, 2), T, block_size=1, activation="identity", **kw)


def test_deletion_curve_and_auc_by_hand():
    res = deletion(V)
    assert res.curve.tolist() == [[10, 6, 3, 1, 0]]
    assert res.values.item() == pytest.approx(0.25 * (10 / 2 + 6 + 3 + 1 + 0 / 2))


def test_reversed_ranking_gives_the_worst_deletion_curve_of_all_orderings():
    aucs = {}
    for perm in itertools.permutations(range(4)):
        attr = torch.tensor(perm, dtype=torch.float).neg()  # pixel perm.index(0) is ranked first, etc.
        aucs[perm] = deletion(attr).values.item()
    correct, reversed_ = deletion(V).values.item(), deletion(-V).values.item()
    assert reversed_ == pytest.approx(0.25 * (5 + 9 + 7 + 4 + 0)) == max(aucs.values())
    assert correct == min(aucs.values())


def test_insertion_is_the_mirror_image():
    res = insertion(V)
    assert res.curve.tolist() == [[0, 4, 7, 9, 10]]
    assert res.values.item() == pytest.approx(0.25 * (0 + 4 + 7 + 9 + 5))
    assert insertion(-V).values.item() < res.values.item()


def test_auc_is_normalised_by_the_fraction_range():
    res = deletion(V, fractions=[0.0, 0.5])
    assert res.values.item() == pytest.approx((10 + 3) / 2)
    res = deletion(V, fractions=[0.25, 0.75])
    assert res.values.item() == pytest.approx((6 + 1) / 2)


def test_block_scores_are_means_including_partial_border_blocks():
    m = torch.arange(9, dtype=torch.float).view(1, 3, 3)
    b = block_scores(m, 2)
    assert b.tolist() == [[[(0 + 1 + 3 + 4) / 4, (2 + 5) / 2], [(6 + 7) / 2, 8.0]]]


def test_blocks_are_removed_whole_with_round_half_up_counts():
    v = torch.arange(16, dtype=torch.float).view(4, 4)
    model = AdditiveImageModel(v)
    x = torch.ones(1, 1, 4, 4)
    res = pixel_deletion(
        model, x, v.unsqueeze(0), T, block_size=2, fractions=[0.0, 0.125, 0.25, 1.0], activation="identity"
    )
    # 4 blocks; the best is the bottom-right one (10+11+14+15 = 50), then bottom-left (8+9+12+13 = 42).
    # k = floor(f * 4 + 0.5) = 0, 1 (0.5 rounds up), 1, 4.
    assert res.curve.tolist() == [[120, 70, 70, 0]]


def test_every_channel_of_a_removed_pixel_is_replaced_together():
    seen = []

    def forward(x):
        seen.append(x.clone())
        return torch.zeros(x.shape[0], 2)

    x = torch.rand(1, 6, 2, 2)  # a B-cos [x, 1-x] encoding
    x[:, 3:] = 1 - x[:, :3]
    attr = torch.tensor([[[9.0, 0.0], [0.0, 0.0]]])
    pixel_deletion(forward, x, attr, T, block_size=1, fractions=[0.0, 0.25], baseline=0.5)
    removed = torch.cat(seen)[1]
    assert torch.equal(removed[:, 0, 0], torch.full((6,), 0.5))
    assert torch.equal(removed[:, 1:, :], x[0, :, 1:, :]) and torch.equal(removed[:, 0, 1], x[0, :, 0, 1])


def test_per_channel_baseline_tensor():
    x = torch.ones(1, 2, 2, 2)
    model = AdditiveImageModel(V)
    baseline = torch.tensor([0.0, 2.0]).view(2, 1, 1)
    res = pixel_deletion(
        model,
        x,
        V.unsqueeze(0),
        T,
        block_size=1,
        fractions=[0.0, 0.25],
        baseline=baseline,
        activation="identity",
    )
    # Removing the top pixel (weight 4): channel 0 drops 4, channel 1 gains 4 -> unchanged sum.
    assert res.curve.tolist() == [[20.0, 20.0]]


def test_channel_maps_are_summed_and_aloe_fractions_are_the_default():
    torch.manual_seed(0)
    model = small_cnn(in_channels=3)
    x = torch.rand(2, 3, 32, 32)
    a = torch.randn(2, 3, 32, 32)
    res = pixel_deletion(model, x, a, torch.tensor([0, 1]))
    summed = pixel_deletion(model, x, a.sum(1), torch.tensor([0, 1]))
    torch.testing.assert_close(res.curve, summed.curve)
    assert res.fractions.tolist() == pytest.approx(list(ALOE_FRACTIONS))
    assert ((res.curve >= 0) & (res.curve <= 1)).all() and ((res.values >= 0) & (res.values <= 1)).all()


def test_fraction_zero_of_deletion_is_the_unperturbed_probability():
    torch.manual_seed(1)
    model = small_cnn(in_channels=1)
    x, a = torch.rand(3, 1, 16, 16), torch.randn(3, 16, 16)
    t = torch.tensor([0, 1, 2])
    res = pixel_deletion(model, x, a, t, block_size=4)
    with torch.no_grad():
        p = model(x).softmax(1)[torch.arange(3), t]
    torch.testing.assert_close(res.curve[:, 0], p)
    ins = pixel_insertion(model, x, a, t, block_size=4, fractions=[0.0, 1.0])
    torch.testing.assert_close(ins.curve[:, 1], p)


def test_bad_inputs():
    with pytest.raises(ValueError, match="NaN/inf"):
        deletion(torch.tensor([1.0, float("inf"), 0, 0]))
    with pytest.raises(ValueError, match="at least two fractions"):
        deletion(V, fractions=[0.5])
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        deletion(V, fractions=[0.0, 1.5])
    with pytest.raises(ValueError, match="matching inputs"):
        pixel_deletion(MODEL, X, torch.ones(1, 3, 3), T)
    with pytest.raises(ValueError, match="block_size must be a positive integer"):
        pixel_deletion(MODEL, X, V.unsqueeze(0), T, block_size=0)
    with pytest.raises(ValueError, match="unknown activation"):
        pixel_deletion(MODEL, X, V.unsqueeze(0), T, activation="relu")
    with pytest.raises(ValueError, match="empty batch"):
        pixel_deletion(MODEL, X[:0], V.unsqueeze(0)[:0], T[:0])
