"""Completeness gap: known answers, the metric's rows, and the complete variant of B-cosified W(x)x."""

import math

import pytest
import torch

from attributions import UnsupportedMethodError, get_method
from metrics.completeness import applies, completeness_gap, evaluate
from metrics.spec import NoConfig, Unit
from models.adapter import ModelAdapter
from models.architectures import ConvDigitNet
from models.bcosify import bcosify
from models.encoding import bcos_inverse, normalized
from tests.helpers import small_cnn

GEN = torch.Generator().manual_seed(0)


def test_gap_by_hand():
    maps = torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]])
    s = completeness_gap(maps, torch.tensor([4.0, -2.0, 0.0]))
    assert s.values[:2].tolist() == [0.0, 2.0]  # |2 - (-2)| / 2
    assert math.isnan(s.values[2]) and s.undefined.tolist() == [False, False, True]
    with pytest.raises(ValueError, match="reference must have shape"):
        completeness_gap(maps, torch.zeros(2))


def bcosified(mean=0.1307, std=0.3081):
    # B = 1 and no logit layer: an untrained B = 2 net's logits are ~1e-10, below float32 resolution.
    torch.manual_seed(0)
    module = bcosify(ConvDigitNet(), image_channels=1, mean=(mean,), std=(std,), b=1.0)
    return ModelAdapter("bcosified", "bcosified", module, bcos_inverse(1), 10, (28, 28))


def unit_for(model, method, n=6):
    images = torch.rand(n, 1, *model.input_size, generator=GEN)
    labels = torch.randint(0, model.num_classes, (n,), generator=GEN)
    return Unit(model, method, images, labels, torch.arange(n), 4, torch.device("cpu"))


def test_bcosified_raw_input_misses_the_layer0_offset_and_the_normalised_variant_is_complete():
    model = bcosified()
    raw = evaluate(unit_for(model, get_method("native")), NoConfig())
    normalised = evaluate(unit_for(model, get_method("native", wrt="normalised-input")), NoConfig())
    assert raw.params == {"claim": "logit"}
    assert normalised.values.max() < 1e-4
    assert raw.values.median() > 1e-2  # the constant w (0.5 - m) / s offset of layer 0 is not in the map
    # With m = 0.5 the [x, 1 - x] pair has no offset: both variants are complete.
    centred = bcosified(mean=0.5)
    assert evaluate(unit_for(centred, get_method("native")), NoConfig()).values.max() < 1e-4


def test_integrated_gradients_claims_f_x_minus_f_baseline():
    model = ModelAdapter("cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (8, 8))
    res = evaluate(unit_for(model, get_method("integrated_gradients", n_steps=200)), NoConfig())
    assert res.params == {"claim": "logit(x) - logit(baseline)"}
    assert res.values.max() < 1e-2  # Gauss-Legendre quadrature of a piecewise-linear path


def test_methods_without_a_claim_get_no_row():
    model = ModelAdapter("cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (8, 8))
    assert "no completeness claim" in applies(unit_for(model, get_method("gradient")))
    assert applies(unit_for(model, get_method("integrated_gradients"))) is None
    assert applies(unit_for(model, get_method("lrp"))) is None


def test_native_normalised_is_native_wrt_the_normalised_input_and_refuses_models_without_one():
    model = bcosified()
    x = model.encode(torch.rand(3, 1, 28, 28, generator=GEN))
    t = torch.tensor([0, 1, 2])
    torch.testing.assert_close(
        get_method("native_normalised").attribute(model, x, t),
        get_method("native", wrt="normalised-input").attribute(model, x, t),
    )
    plain = ModelAdapter("bcos", "bcos", small_cnn(in_channels=2), bcos_inverse(1), 4, (8, 8))
    with pytest.raises(UnsupportedMethodError, match="no input-normalisation layer 0, so this equals 'native'"):
        get_method("native_normalised").check(plain)
