"""An all-zero map ranks no feature: every removal metric flags it undefined and keeps its (tie-order) value."""

import pytest
import torch

from faithbench.metrics._perturb import unranked
from faithbench.metrics.deletion import pixel_deletion, pixel_insertion
from faithbench.metrics.erasure import comprehensiveness_sufficiency
from faithbench.metrics.flipping import pixel_flipping
from faithbench.metrics.road import road
from tests.helpers import AdditiveImageModel

GEN = torch.Generator().manual_seed(0)
V = torch.rand(6, 6, generator=GEN)
X = torch.rand(3, 1, 6, 6, generator=GEN)
T = torch.zeros(3, dtype=torch.long)
MAPS = torch.stack([torch.rand(6, 6, generator=GEN), torch.zeros(6, 6), -torch.rand(6, 6, generator=GEN)])
MODEL = AdditiveImageModel(V)


def test_unranked_by_hand():
    maps = torch.tensor([[0.0, 0.0, 0.0], [0.0, -1e-30, 0.0], [1.0, 0.0, 0.0]])
    assert unranked(maps).tolist() == [True, False, False]
    valid = torch.tensor([[True, True, True], [True, False, True], [False, True, True]])  # padding: not a feature
    assert unranked(maps, valid).tolist() == [True, True, True]


@pytest.mark.parametrize(
    "score",
    [
        lambda: pixel_deletion(MODEL, X, MAPS, T, block_size=2, activation="identity"),
        lambda: pixel_insertion(MODEL, X, MAPS, T, block_size=2, activation="identity"),
        lambda: pixel_flipping(MODEL, X, MAPS, T, block_size=2, activation="identity").morf,
        lambda: pixel_flipping(MODEL, X, MAPS, T, block_size=2, activation="identity").srg,
        lambda: comprehensiveness_sufficiency(MODEL, X, MAPS, T, activation="identity").comprehensiveness,
        lambda: comprehensiveness_sufficiency(MODEL, X, MAPS, T, activation="identity").sufficiency,
        lambda: road(MODEL, X, MAPS, T, fractions=[0.2, 0.5], readout="probability", activation="identity"),
    ],
    ids=["deletion", "insertion", "morf", "srg", "comprehensiveness", "sufficiency", "road"],
)
def test_every_removal_metric_flags_the_zero_map_only_and_keeps_its_value(score):
    result = score()
    assert result.undefined.tolist() == [False, True, False]
    assert torch.isfinite(result.values).all()  # the value the protocol assigns is kept, and counted undefined
