"""Differential tests against Quantus 0.6.0 where the definitions coincide.

Quantus' AUC helpers call ``np.trapz`` (removed in numpy 2.4), so only curves and per-sample
scores are compared, never Quantus' AUCs.
"""

import numpy as np
import pytest
import torch

from faithbench.metrics.complexity import explanation_entropy, gini_index
from faithbench.metrics.deletion import pixel_deletion
from faithbench.metrics.gridpg import grid_pointing_game
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
