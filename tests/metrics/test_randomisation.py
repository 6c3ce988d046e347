"""The model-randomisation sanity check: ranks, Spearman and SSIM against scipy / scikit-image, the cascade."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from skimage.metrics import structural_similarity

from faithbench.attributions import get_method
from faithbench.metrics.randomisation import (
    RandomisationConfig,
    average_ranks,
    cascade_depths,
    cascade_maps,
    evaluate_spearman,
    evaluate_ssim,
    parameter_layers,
    spearman,
    ssim,
)
from faithbench.metrics.spec import Unit
from tests.attributions.test_methods import MODELS
from tests.text_helpers import random_rows, small_text_model


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 30), st.integers(0, 2**31 - 1))
def test_average_ranks_and_spearman_equal_scipys(batch, features, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, (batch, features)).astype(float)  # many ties
    b = rng.normal(size=(batch, features))
    ranks = average_ranks(torch.from_numpy(a)).numpy()
    np.testing.assert_allclose(ranks, stats.rankdata(a, axis=1) - 1)
    rho = spearman(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    for i in range(batch):
        expected = stats.spearmanr(a[i], b[i]).statistic if a[i].std() > 0 else np.nan
        np.testing.assert_allclose(rho[i], expected, rtol=1e-9, atol=1e-12)


def test_spearman_with_a_feature_mask_uses_only_the_features():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 10)), rng.normal(size=(2, 10))
    mask = np.zeros((2, 10), dtype=bool)
    mask[0, :6], mask[1, 2:9] = True, True
    rho = spearman(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(mask)).numpy()
    for i in range(2):
        np.testing.assert_allclose(rho[i], stats.spearmanr(a[i, mask[i]], b[i, mask[i]]).statistic, rtol=1e-9)


def test_ssim_equals_scikit_images_gaussian_ssim():
    rng = np.random.default_rng(1)
    a = rng.uniform(size=(3, 28, 28))
    b = np.clip(a + rng.normal(0, 0.2, a.shape), 0, 1)
    ours = ssim(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    for i in range(3):
        ref = structural_similarity(
            a[i], b[i], gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0
        )
        assert ours[i] == pytest.approx(ref, rel=1e-9)
    assert ssim(torch.from_numpy(a), torch.from_numpy(a)).numpy() == pytest.approx(np.ones(3))


def test_cascade_depths_end_with_every_layer():
    assert cascade_depths(10, 4) == [2, 5, 8, 10]
    assert cascade_depths(3, 8) == [1, 2, 3]


def _unit(model_name: str, method: str, n: int = 4) -> Unit:
    images = torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    return Unit(
        model=MODELS[model_name],
        method=get_method(method),
        images=images,
        labels=torch.arange(n),
        sample_ids=torch.arange(n),
        batch_size=8,
        device=torch.device("cpu"),
    )


def test_the_cascade_redraws_every_layer_and_leaves_the_model_and_buffers_alone():
    unit = _unit("cnn", "gradient")
    before = {k: v.clone() for k, v in unit.model.module.state_dict().items()}
    original, maps, shares, ids, params = cascade_maps(unit, RandomisationConfig(n_samples=3, n_depths=3))
    assert maps.shape == (3, 3, 28, 28) and original.shape == (3, 28, 28) and shares[-1] == 1.0
    assert params["n_layers"] == len(parameter_layers(unit.model.module))
    for k, v in unit.model.module.state_dict().items():
        assert torch.equal(v, before[k]), k  # the explained model is untouched


def test_maps_that_ignore_the_model_pass_nothing_and_gradients_do():
    cfg = RandomisationConfig(n_samples=4, n_depths=3)
    for control in ("edges", "random", "centre"):
        res = evaluate_spearman(_unit("cnn", control), cfg)
        assert torch.allclose(res.curve, torch.ones_like(res.curve)) and not res.undefined.any()
        ssim_res = evaluate_ssim(_unit("cnn", control), cfg)
        assert torch.allclose(ssim_res.values, torch.ones_like(ssim_res.values))
    grads = evaluate_spearman(_unit("cnn", "gradient"), cfg)
    assert grads.curve[:, -1].mean() < 0.5  # a fully random network's gradient is another map
    uniform = evaluate_spearman(_unit("cnn", "uniform"), cfg)
    assert uniform.undefined.all()  # a constant map has no ranking to compare


def test_text_models_are_checked_over_their_tokens():
    model = small_text_model()
    rows = random_rows(4)
    unit = Unit(
        model=model,
        method=get_method("input_x_gradient"),
        images=rows,
        labels=torch.zeros(4, dtype=torch.long),
        sample_ids=torch.arange(4),
        batch_size=8,
        device=torch.device("cpu"),
    )
    res = evaluate_spearman(unit, RandomisationConfig(n_samples=4, n_depths=2))
    assert res.curve.shape == (4, 2) and torch.isfinite(res.values).all() and (res.values < 1).all()
    edges = Unit(
        model=model,
        method=get_method("edges"),
        images=rows,
        labels=torch.zeros(4, dtype=torch.long),
        sample_ids=torch.arange(4),
        batch_size=8,
        device=torch.device("cpu"),
    )
    assert torch.allclose(
        evaluate_spearman(edges, RandomisationConfig(n_samples=4, n_depths=2)).values,
        torch.ones(4, dtype=torch.float64),
    )


@pytest.mark.parametrize("method", ["lime", "shapley_sampling"])
def test_perturbation_methods_score_the_randomised_model_not_the_original(method):
    # the randomised copy has the explained model's name: a scorer kept per name read the original (every row 1.0)
    unit = _unit("cnn", method)
    unit.method = get_method(method, n_samples=40)
    res = evaluate_spearman(unit, RandomisationConfig(n_samples=4, n_depths=2))
    assert res.curve[:, -1].mean() < 0.9
