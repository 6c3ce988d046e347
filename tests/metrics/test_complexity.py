"""Explanation entropy and Gini index: hand-computed values, conventions and errors."""

import math

import pytest
import torch

from faithbench.metrics.complexity import explanation_entropy, gini_index


def test_entropy_by_hand():
    a = torch.tensor([[1.0, 1.0, 2.0], [0.0, 0.0, 5.0], [3.0, 3.0, 3.0]])
    h = explanation_entropy(a).values
    # p = 1/4, 1/4, 1/2 -> H = 1.5 ln 2; one-hot -> 0; uniform -> ln 3.
    torch.testing.assert_close(h, torch.tensor([1.5 * math.log(2), 0.0, math.log(3)]))
    hn = explanation_entropy(a, normalise=True).values
    torch.testing.assert_close(hn, torch.tensor([1.5 * math.log(2) / math.log(3), 0.0, 1.0]))


def test_entropy_uses_absolute_values_and_all_non_batch_dims():
    a = torch.tensor([[[1.0, -1.0], [-1.0, 1.0]]])
    assert explanation_entropy(a).values.item() == pytest.approx(math.log(4))


def test_gini_by_hand():
    a = torch.tensor([[0.0, 0.0, 1.0, 3.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 7.0]])
    # sorted [0, 0, 1, 3], weights 2i - n - 1 = -3 -1 1 3 -> (1 + 9) / (4 * 4).
    torch.testing.assert_close(gini_index(a).values, torch.tensor([10 / 16, 0.0, 1 - 1 / 4]))


def test_all_zero_maps_are_undefined_and_counted():
    a = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    for res in (explanation_entropy(a), explanation_entropy(a, normalise=True), gini_index(a)):
        assert res.undefined.tolist() == [True, False]
        assert math.isnan(res.values[0].item()) and not math.isnan(res.values[1].item())
        assert res.n_undefined == 1


def test_bad_inputs():
    with pytest.raises(ValueError, match="NaN/inf"):
        explanation_entropy(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="at least 2 features"):
        explanation_entropy(torch.ones(2, 1), normalise=True)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        gini_index(torch.ones(4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        gini_index([[1.0, 2.0]])


def test_half_precision_maps_are_summed_in_float32():
    a = torch.rand(2, 4096).half()
    torch.testing.assert_close(
        explanation_entropy(a).values.float(), explanation_entropy(a.float()).values, rtol=1e-3, atol=1e-3
    )


def test_feature_mask_restricts_entropy_and_gini_to_the_features():
    # Token maps with [CLS] / [SEP] / padding columns: masking them equals scoring the features alone.

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 9, generator=gen)
    mask = torch.zeros(4, 9, dtype=torch.bool)
    lengths = [3, 5, 7, 2]
    for i, n in enumerate(lengths):
        mask[i, 1 : 1 + n] = True
    for i, n in enumerate(lengths):
        alone = a[i : i + 1, 1 : 1 + n]
        for positive in (False, True):
            for normalise in (False, True):
                masked = explanation_entropy(a, positive=positive, normalise=normalise, feature_mask=mask).values[i]
                want = explanation_entropy(alone, positive=positive, normalise=normalise).values[0]
                torch.testing.assert_close(masked, want, equal_nan=True)
        torch.testing.assert_close(gini_index(a, feature_mask=mask).values[i], gini_index(alone).values[0])


def test_positive_entropy_ignores_negative_mass():

    a = torch.tensor([[1.0, 1.0, -5.0, 0.0]])
    assert explanation_entropy(a, positive=True).values.item() == pytest.approx(math.log(2))
    assert bool(explanation_entropy(-a.abs(), positive=True).undefined.all())
