"""Differential tests against Quantus 0.6.0 where the definitions coincide.

Quantus' AUC helpers call ``np.trapz`` (removed in numpy 2.4), so only curves and per-sample
scores are compared, never Quantus' AUCs.
"""

import numpy as np
import pytest
import torch

import faithbench
from faithbench.metrics.complexity import explanation_entropy, gini_index
from faithbench.metrics.deletion import pixel_deletion
from faithbench.metrics.gridpg import grid_pointing_game
from faithbench.models.data.datasets import DATASETS
from tests.helpers import small_cnn

quantus = pytest.importorskip("quantus")

GEN = torch.Generator().manual_seed(1234)
MODEL = small_cnn(in_channels=1, classes=4, seed=5)


def common_kwargs(x, a, y):
    return dict(model=MODEL, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=a.numpy(), channel_first=True, device="cpu")


def batch(b=6, side=8):
    x = torch.rand(b, 1, side, side, generator=GEN)
    a = torch.randn(b, 1, side, side, generator=GEN)
    y = torch.randint(0, 4, (b,), generator=GEN)
    return x, a, y


def test_entropy_equals_quantus_complexity():
    x, a, y = batch()
    theirs = quantus.Complexity(abs=True, normalise=False, disable_warnings=True)(**common_kwargs(x, a, y))
    ours = explanation_entropy(a[:, 0].double()).values
    np.testing.assert_allclose(ours.numpy(), np.asarray(theirs), rtol=1e-6, atol=1e-9)


def test_gini_equals_quantus_sparseness_with_its_offset():
    x, a, y = batch()
    theirs = quantus.Sparseness(abs=True, normalise=False, disable_warnings=True)(**common_kwargs(x, a, y))
    ours = gini_index(a[:, 0].double().abs() + 1e-7).values  # Quantus adds 1e-7 to every |a_i|
    np.testing.assert_allclose(ours.numpy(), np.asarray(theirs), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("tiling", ["column-major", "row-major"])
def test_gridpg_cell_equals_relevance_mass_accuracy_on_the_positive_part(tiling):
    n, cell, g = 2, 4, 5
    a = torch.randn(g, n * n, 1, n * cell, n * cell, generator=GEN)
    ours = grid_pointing_game(a, n, tiling=tiling).values
    positive = a.clamp(min=0).reshape(g * n * n, 1, n * cell, n * cell)
    masks = torch.zeros_like(positive)
    for k in range(n * n):
        r, c = (k % n, k // n) if tiling == "column-major" else (k // n, k % n)
        masks[k :: n * n, :, r * cell : (r + 1) * cell, c * cell : (c + 1) * cell] = 1
    x = torch.rand_like(positive)
    y = torch.zeros(g * n * n, dtype=torch.long)
    theirs = quantus.RelevanceMassAccuracy(abs=False, normalise=False, disable_warnings=True)(
        **common_kwargs(x, positive, y), s_batch=masks.numpy()
    )
    np.testing.assert_allclose(ours.reshape(-1).numpy(), np.asarray(theirs), rtol=1e-5)


def test_block_deletion_curve_equals_quantus_region_perturbation():
    x, a, y = batch(side=8)
    b, n_blocks = 2, 16
    theirs = quantus.RegionPerturbation(
        patch_size=b,
        order="morf",
        regions_evaluation=n_blocks,
        perturb_baseline=0.0,
        abs=False,
        normalise=False,
        disable_warnings=True,
    )(**common_kwargs(x, a, y), softmax=True)
    ours = pixel_deletion(MODEL, x, a, y, block_size=b, fractions=[j / n_blocks for j in range(n_blocks + 1)])
    # RegionPerturbation records p(x) - p(x with the top j blocks removed), j = 1..n_blocks.
    drop = ours.curve[:, :1] - ours.curve[:, 1:]
    np.testing.assert_allclose(drop.numpy(), np.asarray(theirs), rtol=1e-4, atol=1e-6)


def test_pixel_deletion_curve_equals_quantus_pixel_flipping():
    x, a, y = batch(side=8)
    step = 4
    theirs = quantus.PixelFlipping(
        features_in_step=step, perturb_baseline=0.0, abs=False, normalise=False, disable_warnings=True
    )(**common_kwargs(x, a, y), softmax=True)
    n = 64
    ours = pixel_deletion(MODEL, x, a, y, block_size=1, fractions=[j * step / n for j in range(n // step + 1)])
    # PixelFlipping records p after each step (not at 0); single-channel input, so features are pixels.
    np.testing.assert_allclose(ours.curve[:, 1:].numpy(), np.asarray(theirs), rtol=1e-4, atol=1e-6)


MODEL3 = small_cnn(in_channels=3, classes=4, seed=6)


@pytest.mark.parametrize("side,step", [(12, 4), (6, 3)])
def test_per_image_mean_deletion_equals_quantus_pixel_flipping_mean(side, step):
    # Quantus' "mean" is each image's mean over every channel and pixel, recomputed after every step; its features
    # are channel values (the map broadcast over 3 channels), so 3 * step of them remove step pixels
    x = torch.rand(5, 3, side, side, generator=GEN)
    a = torch.randn(5, 1, side, side, generator=GEN)
    y = torch.randint(0, 4, (5,), generator=GEN)
    kwargs = dict(model=MODEL3, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=a.numpy(), channel_first=True)
    theirs = quantus.PixelFlipping(
        features_in_step=3 * step, perturb_baseline="mean", abs=False, normalise=False, disable_warnings=True
    )(**kwargs, device="cpu", softmax=True)
    n = side * side
    fractions = [min(j * step, n) / n for j in range(-(-n // step) + 1)]
    ours = pixel_deletion(MODEL3, x, a, y, block_size=1, fractions=fractions, baseline="per-image-mean")
    np.testing.assert_allclose(ours.curve[:, 1:].numpy(), np.asarray(theirs), rtol=0, atol=1e-5)
    fixed = pixel_deletion(MODEL3, x, a, y, block_size=1, fractions=fractions, baseline=float(x.mean()))
    assert not np.allclose(fixed.curve[:, 1:].numpy(), np.asarray(theirs), atol=1e-5)  # the drift matters


def test_per_image_mean_deletion_equals_quantus_region_perturbation_mean():
    x = torch.rand(4, 3, 8, 8, generator=GEN)
    a = torch.randn(4, 1, 8, 8, generator=GEN)
    y = torch.randint(0, 4, (4,), generator=GEN)
    kwargs = dict(model=MODEL3, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=a.numpy(), channel_first=True)
    theirs = quantus.RegionPerturbation(
        patch_size=2, order="morf", regions_evaluation=16, perturb_baseline="mean", abs=False, normalise=False,
        disable_warnings=True,
    )(**kwargs, device="cpu", softmax=True)  # fmt: skip
    ours = pixel_deletion(
        MODEL3, x, a, y, block_size=2, fractions=[j / 16 for j in range(17)], baseline="per-image-mean"
    )
    np.testing.assert_allclose((ours.curve[:, :1] - ours.curve[:, 1:]).numpy(), np.asarray(theirs), rtol=0, atol=1e-5)


def test_score_per_image_mean_equals_quantus_mean_on_a_shipped_model():
    # docs/metrics/removal-baseline.md's table, on 16 of its 64 digits: cnn_mnist, input x gradient maps, 2 px blocks
    data, model = DATASETS.get("mnist").load(None), faithbench.load_model("cnn_mnist")
    x, y = model.encode(data.images[:16]), data.labels[:16]
    maps = faithbench.get_method("input_x_gradient").attribute(model, x, y)
    maps = maps.sum(1) if maps.dim() == 4 else maps
    maps = maps + 1e-6 * maps.abs().amax() * torch.randn(maps.shape, generator=torch.Generator().manual_seed(0))
    net, n = model.module.eval(), 196
    drops = quantus.RegionPerturbation(
        patch_size=2, order="morf", regions_evaluation=n, perturb_baseline="mean", abs=False, normalise=False,
        disable_warnings=True,
    )(model=net, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=maps[:, None].numpy(), channel_first=True,
      device="cpu", softmax=True)  # fmt: skip
    with torch.no_grad():
        p0 = torch.softmax(net(x), 1).gather(1, y[:, None]).numpy()
    curve = np.concatenate([p0, p0 - np.asarray(drops)], 1)
    theirs = ((curve[:, 1:] + curve[:, :-1]) / 2).sum(1) / n
    kw = dict(metric="pixel_deletion", block_size=2, fractions=[j / n for j in range(n + 1)])
    ours = faithbench.score(net, x, maps, y, baseline="per-image-mean", **kw)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=0, atol=1e-5)
    fixed = faithbench.score(net, x, maps, y, baseline="mean", **kw)  # the default: the inputs' mean colour
    assert np.abs(fixed.numpy() - theirs).max() > 1e-3
