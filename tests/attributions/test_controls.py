"""Control explainers: known maps, no model call, batch invariance, text padding, the oracle's ground truth."""

import pytest
import torch

from faithbench.attributions import CONTROLS, UnsupportedMethodError, get_method
from faithbench.metrics.gridpg import cell_indicator, cell_masses, grid_pointing_game
from tests.attributions.test_methods import MODELS
from tests.text_helpers import random_rows, small_text_model

MAPPED = [c for c in CONTROLS if c != "oracle"]


@pytest.mark.parametrize("name", MAPPED)
@pytest.mark.parametrize("model_name", ["cnn", "vit"])
def test_controls_never_call_the_model_and_are_batch_invariant(name, model_name):
    model = MODELS[model_name]
    x = model.encode(torch.rand(5, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    targets = torch.arange(5)
    calls = []
    hook = model.module.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        maps = get_method(name).attribute(model, x, targets)
        parts = torch.cat([get_method(name).attribute(model, x[i : i + 2], targets[i : i + 2]) for i in (0, 2, 4)])
    finally:
        hook.remove()
    assert not calls
    assert maps.shape == (5, 28, 28) and maps.dtype == x.dtype and torch.isfinite(maps).all()
    torch.testing.assert_close(maps, parts, rtol=0, atol=0)
    torch.testing.assert_close(maps, get_method(name).attribute(model, x, (targets + 3) % 10))  # class-agnostic


def test_known_maps_of_uniform_centre_and_edges():
    model = MODELS["cnn"]
    flat = model.encode(torch.full((1, 1, 28, 28), 0.5))
    assert torch.equal(get_method("uniform").attribute(model, flat, torch.tensor([0])), torch.ones(1, 28, 28))
    assert get_method("edges").attribute(model, flat, torch.tensor([0])).abs().max() < 1e-5  # no edge in a flat image
    step = torch.zeros(1, 1, 28, 28)
    step[..., 14:] = 1.0  # a vertical edge between columns 13 and 14
    edges = get_method("edges").attribute(model, model.encode(step), torch.tensor([0]))[0]
    assert edges[:, 13:15].min() > 1 and edges[:, :12].abs().max() < 1e-5 and edges[:, 16:].abs().max() < 1e-5
    centre = get_method("centre").attribute(model, flat, torch.tensor([0]))[0]
    assert centre[13:15, 13:15].min() == centre.max() and centre[0, 0] == centre.min()
    torch.testing.assert_close(centre, centre.flip(0).flip(1))


def test_random_is_seeded_uniform_noise_with_mean_zero():
    model = MODELS["cnn"]
    x = model.encode(torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(1)))
    t = torch.zeros(8, dtype=torch.long)
    a, b = get_method("random", seed=0).attribute(model, x, t), get_method("random", seed=1).attribute(model, x, t)
    assert torch.equal(a, get_method("random", seed=0).attribute(model, x, t)) and not torch.equal(a, b)
    assert a.min() >= -1 and a.max() < 1 and abs(float(a.mean())) < 0.02 and abs(float(a.std()) - 3**-0.5) < 0.02
    assert not torch.equal(a[0], a[1])  # each input its own noise


@pytest.mark.parametrize("name", MAPPED)
def test_text_controls_are_zero_on_padding(name):
    model = small_text_model()
    ids = random_rows(6)
    x = model.encode(ids)
    maps = get_method(name).attribute(model, x, torch.zeros(6, dtype=torch.long))
    pads = ids == 0
    assert maps.shape == ids.shape and (maps[pads] == 0).all() and pads.any()
    if name in ("uniform", "edges", "centre"):
        assert (maps[~pads] > 0).all()
    if name == "edges":  # position prior: 1 on [CLS], then falling
        assert (maps[:, 0] == 1).all() and (maps[:, 1] < maps[:, 0]).all()


def test_the_oracle_has_no_map_outside_a_metric_and_scores_one_on_gridpg():
    model = MODELS["cnn"]
    with pytest.raises(UnsupportedMethodError, match="ground truth"):
        get_method("oracle").attribute(model, model.encode(torch.rand(1, 1, 28, 28)), torch.tensor([0]))
    for tiling in ("column-major", "row-major"):
        truth = cell_indicator(3, 84, 84, tiling=tiling)
        assert torch.equal(cell_masses(truth.float(), 3, tiling=tiling), 28 * 28 * torch.eye(9))  # mask k = cell k
        maps = get_method("oracle").from_truth(truth).unsqueeze(0)  # (1 grid, 9 targets, H, W)
        scores = grid_pointing_game(maps, 3, tiling=tiling, smooth=1)
        assert torch.equal(scores.values, torch.ones(1, 9))


def test_text_random_keeps_its_noise_when_the_embeddings_round_otherwise():
    """A model retrained on another CPU type has other last bits in its embeddings; the noise stream stays (the float
    sum it was keyed on before moved every smoke-text ``random`` row). Padding, batch, seeds and sentences below."""
    model = small_text_model()
    ids = random_rows(6)
    x = model.encode(ids)
    t = torch.zeros(6, dtype=torch.long)
    rounded = torch.where(x != 0, x * (1 + 1e-6 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))), x)
    assert not torch.equal(rounded, x)
    a = get_method("random").attribute(model, x, t)
    assert torch.equal(get_method("random").attribute(model, rounded, t), a)
    longer = torch.cat([x, torch.zeros(6, x.shape[1], 5)], dim=2)  # padded further: the same noise on the tokens
    assert torch.equal(get_method("random").attribute(model, longer, t)[:, : x.shape[2]], a)
    assert torch.equal(get_method("random").attribute(model, x[2:3], t[:1]), a[2:3])  # batch-invariant
    assert not torch.equal(get_method("random", seed=1).attribute(model, x, t), a)
    firsts = a[:, 1]  # every sentence its own stream
    assert len(set(firsts.tolist())) == 6
    present = ids != 0
    assert a[present].min() >= -1 and a[present].max() < 1
