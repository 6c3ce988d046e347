"""Truth metrics: known answers, properties (hypothesis), and the suite's hooks on the hand-set models."""

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import spearmanr

from faithbench.attributions import get_method
from faithbench.metrics.registry import METRICS
from faithbench.metrics.spec import Unit
from faithbench.metrics.truth_agreement import (
    CORRELATION,
    MASS,
    TruthConfig,
    applies,
    average_ranks,
    cell_sums,
    truth_correlation,
    truth_mass,
)
from faithbench.models import load_model
from faithbench.models.adapter import ModelAdapter
from faithbench.models.truth.image_data import truth_images
from faithbench.models.truth.image_exact import IDENTITY, cell_truth
from faithbench.models.truth.image_nets import DEFAULT_LAYOUT
from tests.helpers import small_cnn

# Small integers: many ties, exactly representable, so rescaling by a power of two changes no order.
values = st.integers(-4, 4).map(float)
power_of_two = st.integers(-8, 8).map(lambda e: 2.0**e)


SHAPES = st.tuples(st.integers(1, 4), st.integers(2, 12))  # (samples, features)


def pairs():
    return SHAPES.flatmap(
        lambda shape: st.tuples(
            hnp.arrays(np.float32, shape, elements=values).map(torch.from_numpy),
            hnp.arrays(np.float64, shape, elements=values).map(torch.from_numpy),
        )
    )


# ----------------------------------------------------------------------------- known answers


def test_correlation_and_mass_by_hand():
    truth = torch.tensor([[3.0, 1.0, 0.0, 0.0, -2.0]])
    same_order = torch.tensor([[30.0, 2.0, 0.5, 0.5, -1.0]])
    assert truth_correlation(same_order, truth).values.item() == pytest.approx(1.0)
    assert truth_correlation(-truth, truth).values.item() == pytest.approx(-1.0)
    # positive mass 30 + 2 + 0.5 + 0.5; inside the positive truth (the first two): 32
    assert truth_mass(same_order, truth).values.item() == pytest.approx(32 / 33)
    on_zeros = torch.tensor([[0.0, -5.0, 1.0, 2.0, 0.0]])
    assert truth_mass(on_zeros, truth).values.item() == 0.0


def test_ties_get_average_ranks_as_scipy():
    x = torch.tensor([[2.0, 1.0, 2.0, 0.0, 2.0]])
    assert average_ranks(x).tolist() == [[4.0, 2.0, 4.0, 1.0, 4.0]]
    a = torch.tensor([[1.0, 0.0, 0.0, 3.0, 3.0, -1.0]])
    t = torch.tensor([[2.0, 0.0, 1.0, 1.0, 5.0, 0.0]])
    expected = spearmanr(a[0].numpy(), t[0].numpy()).statistic
    assert truth_correlation(a, t).values.item() == pytest.approx(expected, abs=1e-6)


def test_undefined_where_a_map_or_the_truth_is_constant_or_has_no_positive_part():
    truth = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    maps = torch.tensor([[2.0, 2.0, 2.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    rho = truth_correlation(maps, truth)
    assert rho.undefined.tolist() == [True, True, False] and torch.isnan(rho.values[:2]).all()
    mass = truth_mass(torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), truth)
    assert mass.undefined.tolist() == [True, True, True]  # no positive mass; no positive truth (twice)


def test_cell_sums_by_hand_and_errors():
    maps = torch.arange(16.0).view(1, 4, 4)
    cells = torch.tensor([[0, 0, 1, 1]] * 2 + [[2, 2, 3, 3]] * 2)
    assert cell_sums(maps, cells).tolist() == [[0 + 1 + 4 + 5, 2 + 3 + 6 + 7, 8 + 9 + 12 + 13, 10 + 11 + 14 + 15]]
    with pytest.raises(ValueError, match=r"cells must be an int64 tensor of shape \(4, 4\)"):
        cell_sums(maps, cells[:2])
    with pytest.raises(ValueError, match=r"truth must have the attributions' shape \(1, 16\), got \(1, 15\)"):
        truth_correlation(torch.zeros(1, 16), torch.zeros(1, 15))
    with pytest.raises(ValueError, match="attributions contains 1 NaN/inf"):
        truth_mass(torch.tensor([[math.nan, 1.0]]), torch.ones(1, 2))


def test_the_truth_scores_one_and_a_map_on_the_distractors_scores_zero_mass():
    model = load_model("truth_additive")
    x, y = truth_images(32)
    truth = model.truth(x, y)
    cells = model.truth.cells
    for a, t in ((truth, truth), (cell_sums(truth, cells), cell_truth(model, x, y))):
        assert (truth_correlation(a, t).values == 1).all() and (truth_mass(a, t).values == 1).all()
    distractors = torch.isin(cells, torch.tensor(DEFAULT_LAYOUT.distractor_cells)).double()
    on_distractors = x[:, 0].double() * distractors  # their bright content: what an intensity map shows there
    for a, t in ((on_distractors, truth), (cell_sums(on_distractors, cells), cell_truth(model, x, y))):
        assert (truth_mass(a, t).values == 0).all()


# ----------------------------------------------------------------------------- properties


@given(pairs())
def test_bounds_and_nan_exactly_where_undefined(pair):
    a, t = pair
    for score, low in ((truth_correlation, -1.0), (truth_mass, 0.0)):
        s = score(a, t)
        defined = s.values[~s.undefined]
        assert ((defined >= low) & (defined <= 1)).all()
        assert torch.equal(torch.isnan(s.values), s.undefined)


@given(pairs(), power_of_two)
def test_invariant_to_positive_rescaling_of_the_map(pair, c):
    a, t = pair
    for score in (truth_correlation, truth_mass):
        torch.testing.assert_close(score(a * c, t).values, score(a, t).values, equal_nan=True)


@given(pairs())
def test_correlation_is_spearmans_rho(pair):
    a, t = pair
    s = truth_correlation(a, t)
    for i in range(len(a)):
        if not s.undefined[i]:
            expected = spearmanr(a[i].numpy(), t[i].numpy()).statistic
            assert s.values[i].item() == pytest.approx(expected, abs=1e-5)


@given(pairs(), st.integers(0, 3))
def test_a_samples_scores_do_not_depend_on_the_batch(pair, i):
    a, t = pair
    i = i % len(a)
    for score in (truth_correlation, truth_mass):
        torch.testing.assert_close(
            score(a, t).values[i : i + 1], score(a[i : i + 1], t[i : i + 1]).values, equal_nan=True
        )


# ----------------------------------------------------------------------------- the suite's hooks


def unit_for(model, method, n=12):
    images, labels = truth_images(n)
    return Unit(
        model=model,
        method=method,
        images=images,
        labels=labels,
        sample_ids=torch.arange(n),
        batch_size=8,
        device=torch.device("cpu"),
    )


def test_registered_and_applied_only_to_models_with_a_truth():
    assert METRICS.get("truth_correlation") is CORRELATION and METRICS.get("truth_mass") is MASS
    assert CORRELATION.higher_is_better and MASS.higher_is_better and CORRELATION.ground_truth
    plain = ModelAdapter("plain", "standard", small_cnn(), IDENTITY, 4, (28, 28))
    assert "model 'plain' has no known attribution" in applies(unit_for(plain, get_method("gradient")))
    assert applies(unit_for(load_model("truth_additive"), get_method("gradient"))) is None


@pytest.mark.parametrize("resolution", ["patch", "pixel"])
def test_evaluate_scores_deeplift_and_the_oracle_at_one(resolution):
    model = load_model("truth_additive")
    cfg = TruthConfig(resolution=resolution)
    for method in ("deeplift", "oracle"):
        unit = unit_for(model, get_method(method))
        for spec in (CORRELATION, MASS):
            result = spec.evaluate(unit, cfg)
            assert result.params == {"resolution": resolution} and result.explained == "samples"
            assert result.sample_ids.tolist() == list(range(12)) and not result.undefined.any()
            torch.testing.assert_close(result.values, torch.ones(12), atol=1e-5, rtol=0)


def test_evaluate_separates_a_method_that_marks_the_distractors():
    model = load_model("truth_additive")
    gradcam = unit_for(model, get_method("gradcam"), n=48)
    deeplift = unit_for(model, get_method("deeplift"), n=48)
    cfg = TruthConfig()
    assert CORRELATION.evaluate(gradcam, cfg).values.nanmean() < 0.8
    assert MASS.evaluate(gradcam, cfg).values.nanmean() < 0.8 < MASS.evaluate(deeplift, cfg).values.nanmean()


def test_config_names_the_valid_resolutions():
    with pytest.raises(ValueError, match="unknown resolution 'cells'; valid choices: 'patch', 'pixel'"):
        TruthConfig(resolution="cells")
