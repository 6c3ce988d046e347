"""Feature ranks hold across float rounding: values equal up to their last bits tie and are ordered by position."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from faithbench.metrics._perturb import RANK_BITS, feature_ranks, rank_keys
from faithbench.metrics.flipping import pixel_flipping


def _nudged(x: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """``x`` moved by ``steps`` float32 ulps each (what another CPU's kernels do to a map)."""
    out = x.clone()
    for _ in range(int(steps.abs().max())):
        go = steps != 0
        out = torch.where(go, torch.nextafter(out, torch.where(steps > 0, torch.inf, -torch.inf)), out)
        steps = steps - steps.sign()
    return out


def _map_with_exact_ties(gen: torch.Generator, b: int = 6, n: int = 64) -> torch.Tensor:
    """Values on a 12-bit grid (far from any 16-bit rounding boundary), drawn from 8 levels: many exact ties."""
    levels = torch.randint(-2048, 2048, (b, 8), generator=gen).float() / 1024
    return levels.gather(1, torch.randint(0, 8, (b, n), generator=gen))


def test_known_keys():
    x = torch.tensor([[1.0, 1.0 + 2**-20, 1.0 - 2**-20, 1.0 + 2**-14, 0.5, 0.0, -(1.0 + 2**-20), 3e-30]])
    keys = rank_keys(x)
    assert keys[0].tolist() == [1.0, 1.0, 1.0, 1.0 + 2**-14, 0.5, 0.0, -1.0, keys[0, 7].item()]
    assert abs(keys[0, 7].item() - 3e-30) < 3e-30 * 2**-16  # tiny values keep their own precision
    # the three values within 2^-20 of 1 tie, ordered by position, after the one 2^-14 above them
    assert feature_ranks(x)[0].tolist() == [1, 2, 3, 0, 4, 6, 7, 5]
    assert feature_ranks(x, bits=None)[0].tolist() == [2, 1, 3, 0, 4, 6, 7, 5]


def test_a_map_nudged_by_ulps_ranks_as_its_exact_values():
    gen = torch.Generator().manual_seed(0)
    x = _map_with_exact_ties(gen)
    nudged = _nudged(x, torch.randint(-3, 4, x.shape, generator=gen))
    assert not torch.equal(nudged, x)
    assert torch.equal(feature_ranks(nudged), feature_ranks(x))
    # without the rounding, the nudges reorder the tied features: the test above can fail
    assert not torch.equal(feature_ranks(nudged, bits=None), feature_ranks(x, bits=None))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(4, 30))
def test_keys_are_odd_monotone_and_within_their_precision(seed, bits):
    x = torch.randn(4, 50, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 10.0 ** (seed % 7 - 3)
    keys = rank_keys(x, bits)
    assert torch.equal(rank_keys(-x, bits), -keys)  # so LeRF (the negated map's MoRF) ties the same features
    assert ((keys - x).abs() <= x.abs() * 2.0**-bits).all()
    s = x.sort(dim=1).values
    assert (rank_keys(s, bits).diff(dim=1) >= 0).all()  # rounding never reverses an order, it only ties


def test_ranks_sort_by_keys_and_ties_by_position():
    gen = torch.Generator().manual_seed(1)
    x = _map_with_exact_ties(gen)
    ranks = feature_ranks(x)
    order = ranks.argsort(dim=1)
    key = rank_keys(x).gather(1, order)
    pos = order.float()
    assert (key.diff(dim=1) <= 0).all()
    assert (pos.diff(dim=1)[key.diff(dim=1) == 0] > 0).all()
    assert ranks.sort(dim=1).values.equal(torch.arange(x.shape[1]).expand_as(ranks))


def test_pixel_flipping_of_a_nudged_map_is_the_exact_maps():
    """End to end: MoRF / LeRF / SRG of a map with tied blocks do not move when its last bits do."""
    gen = torch.Generator().manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 5))
    torch.nn.init.normal_(net[1].weight, generator=gen)
    images = torch.rand(6, 3, 8, 8, generator=gen)
    maps = _map_with_exact_ties(gen).reshape(6, 8, 8)
    nudged = _nudged(maps, torch.randint(-3, 4, maps.shape, generator=gen))
    targets = torch.arange(6) % 5
    kw = {"block_size": 1, "fractions": [i / 8 for i in range(9)]}
    exact, moved = pixel_flipping(net, images, maps, targets, **kw), pixel_flipping(net, images, nudged, targets, **kw)
    for name in ("morf", "lerf", "srg"):
        assert torch.equal(getattr(exact, name).values, getattr(moved, name).values), name
    assert RANK_BITS == 16
