"""Property tests (hypothesis): bounds, invariances, batch independence, uniform-map values."""

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from faithbench.metrics.complexity import explanation_entropy, gini_index
from faithbench.metrics.deletion import pixel_deletion, pixel_insertion
from faithbench.metrics.erasure import comprehensiveness_sufficiency
from faithbench.metrics.gridpg import grid_pointing_game
from faithbench.metrics.seqpg import sequence_pointing_game
from tests.helpers import small_cnn

# Tiny magnitudes would underflow when rescaled (changing ties), so they are flushed to zero.
finite = st.floats(-100, 100, allow_nan=False, width=32).map(lambda v: 0.0 if abs(v) < 1e-20 else v)
# Powers of two rescale floats exactly, so rankings and ratios are exactly preserved.
power_of_two = st.integers(-8, 8).map(lambda e: 2.0**e)


def maps(shape):
    return hnp.arrays(np.float32, shape, elements=finite).map(torch.from_numpy)


@st.composite
def grid_maps(draw):
    n = draw(st.sampled_from([2, 3]))
    cell = draw(st.integers(1, 3))
    g = draw(st.integers(1, 3))
    return n, draw(maps((g, n * n, n * cell, n * cell)))


# ----------------------------------------------------------------------------- GridPG


@given(grid_maps(), st.sampled_from(["column-major", "row-major"]), st.sampled_from([1, 3]))
def test_gridpg_in_unit_interval_and_nan_exactly_where_undefined(data, tiling, smooth):
    n, a = data
    s = grid_pointing_game(a, n, tiling=tiling, smooth=smooth, zero_mass="nan")
    v = s.values[~s.undefined]
    assert ((v >= 0) & (v <= 1 + 1e-6)).all()
    assert torch.equal(torch.isnan(s.values), s.undefined)


@given(grid_maps(), power_of_two)
def test_gridpg_invariant_to_positive_rescaling(data, c):
    n, a = data
    torch.testing.assert_close(grid_pointing_game(a * c, n).values, grid_pointing_game(a, n).values)


@given(grid_maps(), st.integers(0, 2))
def test_gridpg_score_of_a_grid_does_not_depend_on_the_batch(data, i):
    n, a = data
    i = i % a.shape[0]
    full = grid_pointing_game(a, n, zero_mass="drop-grid")
    alone = grid_pointing_game(a[i : i + 1], n, zero_mass="drop-grid")
    torch.testing.assert_close(full.values[i : i + 1], alone.values, equal_nan=True)


@given(grid_maps(), st.randoms(use_true_random=False), st.sampled_from(["column-major", "row-major"]))
def test_permuting_grid_cells_permutes_the_scores(data, rnd, tiling):
    n, a = data
    g, t, h, w = a.shape
    perm = list(range(n * n))
    rnd.shuffle(perm)
    cell = h // n

    def pos(k):
        return (k % n, k // n) if tiling == "column-major" else (k // n, k % n)

    moved = torch.empty_like(a)
    for k in range(n * n):  # cell k's content moves to cell perm[k]
        (r0, c0), (r1, c1) = pos(k), pos(perm[k])
        moved[..., r1 * cell : (r1 + 1) * cell, c1 * cell : (c1 + 1) * cell] = a[
            ..., r0 * cell : (r0 + 1) * cell, c0 * cell : (c0 + 1) * cell
        ]
    cells = torch.arange(t).expand(g, t)
    before = grid_pointing_game(a, n, tiling=tiling)
    after = grid_pointing_game(moved, n, cells=torch.tensor(perm)[cells], tiling=tiling)
    torch.testing.assert_close(after.values, before.values)


@given(st.sampled_from([2, 3]), st.floats(0.01, 100))
def test_gridpg_uniform_map_scores_one_over_cells(n, value):
    s = grid_pointing_game(torch.full((1, n * n, 2 * n, 2 * n), value), n)
    torch.testing.assert_close(s.values, torch.full((1, n * n), 1 / n**2))


# ----------------------------------------------------------------------------- SeqPG


@st.composite
def sequences(draw):
    b = draw(st.integers(1, 4))
    s = draw(st.integers(2, 4))
    length = draw(st.integers(1, 5))
    attr = draw(maps((b, s * length + 2)))
    seg = torch.cat([torch.tensor([-1]), torch.arange(s).repeat_interleave(length), torch.tensor([-1])])
    target = draw(hnp.arrays(np.int64, (b,), elements=st.integers(0, s - 1))).astype(np.int64)
    return attr, seg.expand(b, -1), torch.from_numpy(target), s


@given(sequences(), power_of_two)
def test_seqpg_bounds_rescaling_and_batch_independence(data, c):
    attr, seg, target, s = data
    res = sequence_pointing_game(attr, seg, target, n_segments=s)
    assert ((res.values >= 0) & (res.values <= 1 + 1e-6)).all()
    torch.testing.assert_close(sequence_pointing_game(attr * c, seg, target).values, res.values)
    alone = sequence_pointing_game(attr[-1:], seg[-1:], target[-1:], n_segments=s)
    torch.testing.assert_close(alone.values, res.values[-1:])


# ----------------------------------------------------------------------------- entropy / Gini


@given(st.integers(1, 4).flatmap(lambda b: st.integers(2, 50).flatmap(lambda n: maps((b, n)))))
def test_entropy_and_gini_bounds(a):
    n = a.shape[1]
    h, g = explanation_entropy(a), gini_index(a)
    ok = ~h.undefined
    assert ((h.values[ok] >= -1e-6) & (h.values[ok] <= math.log(n) + 1e-5)).all()
    assert ((g.values[ok] >= -1e-6) & (g.values[ok] <= 1 - 1 / n + 1e-6)).all()
    hn = explanation_entropy(a, normalise=True).values[ok]
    assert ((hn >= -1e-6) & (hn <= 1 + 1e-6)).all()


@given(maps((3, 12)), power_of_two, st.randoms(use_true_random=False))
def test_entropy_and_gini_invariances(a, c, rnd):
    perm = list(range(12))
    rnd.shuffle(perm)
    flipped = a.clone()
    flipped[:, ::2] *= -1
    for f in (explanation_entropy, gini_index):
        ref = f(a).values
        for variant in (a * c, a[:, perm], flipped):
            torch.testing.assert_close(f(variant).values, ref, equal_nan=True)
        torch.testing.assert_close(f(a[1:2]).values, ref[1:2], equal_nan=True)


@given(st.integers(2, 200), st.floats(0.001, 1000))
def test_uniform_map_values(n, value):
    a = torch.full((1, n), value, dtype=torch.float64)
    assert math.isclose(explanation_entropy(a).values.item(), math.log(n), rel_tol=1e-9)
    assert math.isclose(explanation_entropy(a, normalise=True).values.item(), 1.0, rel_tol=1e-9)
    assert abs(gini_index(a).values.item()) < 1e-9


# ----------------------------------------------------------------------------- perturbation metrics

CNN = small_cnn(in_channels=2, classes=3, seed=3)


@st.composite
def image_batches(draw):
    b = draw(st.integers(1, 4))
    x = draw(hnp.arrays(np.float32, (b, 2, 8, 8), elements=st.floats(0, 1, width=32)))
    a = draw(maps((b, 8, 8)))
    t = draw(hnp.arrays(np.int64, (b,), elements=st.integers(0, 2)))
    return torch.from_numpy(x), a, torch.from_numpy(t)


@given(image_batches(), st.sampled_from([1, 2, 3]), st.integers(1, 40))
def test_deletion_insertion_bounds_and_batch_independence(data, block, chunk):
    x, a, t = data
    for f in (pixel_deletion, pixel_insertion):
        res = f(CNN, x, a, t, block_size=block, chunk_size=chunk)
        assert ((res.curve >= 0) & (res.curve <= 1)).all() and ((res.values >= 0) & (res.values <= 1)).all()
        alone = f(CNN, x[-1:], a[-1:], t[-1:], block_size=block, chunk_size=1000)
        torch.testing.assert_close(alone.curve, res.curve[-1:], rtol=1e-5, atol=1e-6)


@given(image_batches(), power_of_two)
def test_deletion_and_erasure_invariant_to_positive_rescaling(data, c):
    x, a, t = data
    torch.testing.assert_close(
        pixel_deletion(CNN, x, a * c, t, block_size=2).curve, pixel_deletion(CNN, x, a, t, block_size=2).curve
    )
    ref = comprehensiveness_sufficiency(CNN, x, a, t)
    scaled = comprehensiveness_sufficiency(CNN, x, a * c, t)
    torch.testing.assert_close(scaled.comprehensiveness.curve, ref.comprehensiveness.curve)
    torch.testing.assert_close(scaled.sufficiency.curve, ref.sufficiency.curve)


@given(image_batches(), st.integers(1, 50))
def test_erasure_bounds_and_batch_independence(data, chunk):
    x, a, t = data
    res = comprehensiveness_sufficiency(CNN, x, a, t, chunk_size=chunk)
    for part in (res.comprehensiveness, res.sufficiency):
        assert ((part.curve >= -1) & (part.curve <= 1)).all()
    alone = comprehensiveness_sufficiency(CNN, x[:1], a[:1], t[:1])
    torch.testing.assert_close(alone.comprehensiveness.values, res.comprehensiveness.values[:1], rtol=1e-5, atol=1e-6)
