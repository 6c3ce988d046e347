"""Normalised AOPC (Edin et al. 2025): hand-computed bounds of an additive model, the bounds against every
permutation (exact and by a wide beam), the authors' beam search written out (JoakimEdin/naopc), and properties."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from faithbench.metrics.aopc_bounds import aopc_bounds
from faithbench.metrics.naopc import NaopcConfig, aopc_orders, normalised_aopc
from faithbench.metrics.single_deletion import cell_index
from faithbench.metrics.toy import linear_image_model

MASK = 0


def _additive(w: torch.Tensor):
    """A one-class model whose output ("probability", identity activation) is the sum of the weights of the tokens
    still present: removing a set S drops it by sum_{j in S} w_j."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        return ((x != MASK).double() * w).sum(dim=1, keepdim=True)

    return forward


def _small_net(seed: int = 0, vocab: int = 20):
    """A small non-additive classifier over token ids (tanh of mean-pooled embeddings)."""
    torch.manual_seed(seed)
    emb, lin = torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, 3)

    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return lin(torch.tanh(emb(x)).mean(1) * 3)

    return forward


def _aopc_of(forward, x, target, order):
    """AOPC of one removal order, written out: (1/n) sum_k [p(x) - p(x without order[:k])]."""
    p = lambda z: forward(z).softmax(1)[:, target]  # noqa: E731
    p0, total, z = p(x[None])[0], 0.0, x.clone()
    for j in order:
        z[j] = MASK
        total += (p0 - p(z[None])[0]).item()
    return total / len(order)


def test_hand_computed_bounds_of_an_additive_model():
    # w = (3, 1, 2): AOPC(pi) = (1/3) sum_i w_{pi_i} (3 - i + 1); the best order is by w descending, the worst ascending
    x, w = torch.tensor([[5, 6, 7]]), torch.tensor([3.0, 1.0, 2.0], dtype=torch.float64)
    mask, t = torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, dtype=torch.long)
    kw = dict(baseline=MASK, activation="identity")
    for exact_max in (10, 0):  # exact, and the beam search (greedy is optimal here)
        b = aopc_bounds(_additive(w), x, t, mask, exact_max=exact_max, beam_size=1, **kw)
        assert b.upper.item() == pytest.approx(14 / 3) and b.lower.item() == pytest.approx(10 / 3)
        assert bool(b.exact.item()) == (exact_max == 10)
    comp, suff = aopc_orders(_additive(w), x, w.float()[None], t, mask, **kw)
    assert (comp.item(), suff.item()) == pytest.approx((14 / 3, 10 / 3))
    scores = normalised_aopc(comp, b, w.float()[None], mask)
    assert scores.values.item() == pytest.approx(1.0)
    assert normalised_aopc(suff, b, w.float()[None], mask).values.item() == pytest.approx(0.0)
    comp_reversed, _ = aopc_orders(_additive(w), x, -w.float()[None], t, mask, **kw)
    assert normalised_aopc(comp_reversed, b, -w.float()[None], mask).values.item() == pytest.approx(0.0)


def test_the_bounds_are_the_extremes_over_every_permutation():
    forward = _small_net()
    torch.manual_seed(1)
    x = torch.randint(2, 20, (3, 8))
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[:, 0] = False  # a [CLS] stand-in: never removed
    mask[2, -2:] = False  # padding: a shorter sample
    t = forward(x).argmax(1)
    exact = aopc_bounds(forward, x, t, mask, baseline=MASK, exact_max=10)
    wide = aopc_bounds(forward, x, t, mask, baseline=MASK, exact_max=0, beam_size=5000)
    narrow = aopc_bounds(forward, x, t, mask, baseline=MASK, exact_max=0, beam_size=1)
    for i in range(3):
        feats = mask[i].nonzero().flatten().tolist()
        every = [_aopc_of(forward, x[i], t[i], order) for order in itertools.permutations(feats)]
        assert exact.lower[i].item() == pytest.approx(min(every), abs=1e-6)
        assert exact.upper[i].item() == pytest.approx(max(every), abs=1e-6)
        assert wide.lower[i].item() == pytest.approx(min(every), abs=1e-6)  # a beam as wide as every order
        assert wide.upper[i].item() == pytest.approx(max(every), abs=1e-6)
        assert min(every) - 1e-6 <= narrow.lower[i].item() <= max(every) + 1e-6  # an achieved order's AOPC
        assert min(every) - 1e-6 <= narrow.upper[i].item() <= max(every) + 1e-6


def _authors_beam(forward, x, target, feats, beam_size):
    """The authors' beam search (naopc_beam/bound_approximation_methods.py), written out for one input: every kept
    order is extended by each remaining feature, scored by its cumulative drop, and the best beam_size kept; the
    descending beam maximises, the ascending one minimises. Returns their (lower, upper) AOPC: the found orders'
    AOPC, the sum of drops over n steps / n."""
    p = lambda z: forward(z).softmax(1)[:, target]  # noqa: E731
    p0 = p(x[None])[0].item()

    def drop(removed):
        z = x.clone()
        z[list(removed)] = MASK
        return p0 - p(z[None])[0].item()

    out = []
    for descending in (False, True):
        beam = [((), 0.0)]
        for _ in feats:
            proposals = [
                (order + (j,), score + drop(order + (j,))) for order, score in beam for j in feats if j not in order
            ]
            proposals.sort(key=lambda e: e[1], reverse=descending)
            beam = proposals[:beam_size]
        out.append(beam[0][1] / len(feats))
    return tuple(out)


@pytest.mark.parametrize("beam_size", [1, 2, 5])
def test_the_beam_search_finds_the_authors_bounds(beam_size):
    forward = _small_net(seed=3)
    torch.manual_seed(4)
    x = torch.randint(2, 20, (4, 9))
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[:, 0] = False
    t = forward(x).argmax(1)
    ours = aopc_bounds(forward, x, t, mask, baseline=MASK, exact_max=0, beam_size=beam_size, chunk_size=7)
    for i in range(4):
        lower, upper = _authors_beam(forward, x[i], t[i].item(), mask[i].nonzero().flatten().tolist(), beam_size)
        assert ours.lower[i].item() == pytest.approx(lower, abs=1e-6)
        assert ours.upper[i].item() == pytest.approx(upper, abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6))
def test_naopc_lies_between_0_and_1_with_exact_bounds(seed, n):
    forward = _small_net(seed=seed % 7)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(2, 20, (2, n + 1), generator=g)
    mask = torch.ones(2, n + 1, dtype=torch.bool)
    mask[:, 0] = False
    t = forward(x).argmax(1)
    maps = torch.randn(2, n + 1, generator=g)
    bounds = aopc_bounds(forward, x, t, mask, baseline=MASK)
    comp, suff = aopc_orders(forward, x, maps, t, mask, baseline=MASK)
    for aopc in (comp, suff):
        scores = normalised_aopc(aopc, bounds, maps, mask)
        defined = scores.values[~scores.undefined]
        assert bool(((defined >= -1e-4) & (defined <= 1 + 1e-4)).all())  # float32 p, batched differently
    assert bool((bounds.lower <= bounds.upper + 1e-12).all())


def test_a_constant_map_and_a_model_blind_to_order_are_undefined():
    x, mask = torch.tensor([[5, 6, 7], [5, 6, 7]]), torch.ones(2, 3, dtype=torch.bool)
    t = torch.zeros(2, dtype=torch.long)
    w = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)  # every order removes the same mass: U = L
    b = aopc_bounds(_additive(w), x, t, mask, baseline=MASK, activation="identity")
    maps = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    comp, _ = aopc_orders(_additive(w), x, maps, t, mask, baseline=MASK, activation="identity")
    scores = normalised_aopc(comp, b, maps, mask)
    assert scores.undefined.tolist() == [True, True] and bool(scores.values.isnan().all())


def test_bad_input_is_named():
    forward, x, t = _small_net(), torch.randint(2, 20, (2, 4)), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="selects no feature in samples \\[1\\]"):
        aopc_bounds(forward, x, t, torch.tensor([[True] * 4, [False] * 4]), baseline=MASK)
    with pytest.raises(ValueError, match="feature_mask must be a bool tensor"):
        aopc_bounds(forward, x, t, torch.ones(2, 3, dtype=torch.bool), baseline=MASK)
    with pytest.raises(ValueError, match="exact_max"):
        NaopcConfig(exact_max=30)
    with pytest.raises(ValueError, match="beam_size"):
        NaopcConfig(beam_size=0)


def test_image_cells_are_the_features_hand_computed():
    """The toy image model: logit 0 = sum(w * x), w = 0..15 on a 4 x 4 image of ones; its 2 x 2 cells carry 10, 18, 42
    and 50. Removing them largest first drops 50, 92, 110, 120 (AOPC 93), smallest first 10, 28, 70, 120 (57)."""
    toy = linear_image_model()
    cells, mask = cell_index(4, 4, 2), torch.ones(1, 4, dtype=torch.bool)
    kw = dict(baseline=0.0, activation="identity", features=cells)
    for exact_max in (10, 0):
        b = aopc_bounds(toy.forward, toy.inputs, toy.targets, mask, exact_max=exact_max, beam_size=1, **kw)
        assert (b.upper.item(), b.lower.item()) == pytest.approx((93.0, 57.0))
    sums = torch.tensor([[10.0, 18.0, 42.0, 50.0]])
    assert torch.equal(torch.zeros(1, 4).index_add_(1, cells.flatten(), toy.attributions.flatten(1).float()), sums)
    comp, suff = aopc_orders(toy.forward, toy.inputs, sums, toy.targets, mask, **kw)
    assert (comp.item(), suff.item()) == pytest.approx((93.0, 57.0))


def _image_aopc_of(forward, x, target, cells, order):
    """AOPC of one order of an image's cells, written out (each cell's pixels set to 0, the baseline)."""
    p = lambda z: forward(z).softmax(1)[:, target]  # noqa: E731
    p0, total, z = p(x[None])[0], 0.0, x.clone()
    for k in order:
        z[:, cells == k] = 0.0
        total += (p0 - p(z[None])[0]).item()
    return total / len(order)


def test_image_bounds_are_the_extremes_over_every_order_of_the_cells():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Flatten(), torch.nn.Linear(4 * 9 * 9, 3)
    ).double()
    forward = lambda z: net(z).detach()  # noqa: E731
    x = torch.rand(2, 2, 9, 9, dtype=torch.float64) * 3
    t, cells = forward(x).argmax(1), cell_index(9, 9, 2)  # uneven cells: 5 and 4 px
    mask = torch.ones(2, 4, dtype=torch.bool)
    exact = aopc_bounds(forward, x, t, mask, baseline=0.0, features=cells)
    wide = aopc_bounds(forward, x, t, mask, baseline=0.0, features=cells, exact_max=0, beam_size=100)
    for i in range(2):
        every = [_image_aopc_of(forward, x[i], t[i], cells, order) for order in itertools.permutations(range(4))]
        for bounds in (exact, wide):
            assert bounds.lower[i].item() == pytest.approx(min(every), abs=1e-6)
            assert bounds.upper[i].item() == pytest.approx(max(every), abs=1e-6)
    with pytest.raises(ValueError, match=r"feature_mask must be a bool tensor of shape \(2, 4\)"):
        aopc_bounds(forward, x, t, torch.ones(2, 81, dtype=torch.bool), baseline=0.0, features=cells)
