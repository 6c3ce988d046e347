"""Completeness gap: known answers, the metric's rows, the complete variant of B-cosified W(x)x, and the positional
term of ViTs (``positional_share``)."""

import math

import pytest
import torch

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.metrics.completeness import (
    CompletenessConfig,
    applies,
    completeness_gap,
    evaluate,
    evaluate_positional,
    positional_applies,
    positional_share,
)
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.bcosify import bcosify
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import ConvDigitNet, bcos_digit_vit
from tests.helpers import bcosified_digit_vit, small_cnn

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
    return Unit(
        model=model,
        method=method,
        images=images,
        labels=labels,
        sample_ids=torch.arange(n),
        batch_size=4,
        device=torch.device("cpu"),
    )


def test_bcosified_raw_input_misses_the_layer0_offset_and_the_normalised_variant_is_complete():
    model = bcosified()
    raw = evaluate(unit_for(model, get_method("native")), CompletenessConfig())
    normalised = evaluate(unit_for(model, get_method("native", wrt="normalised-input")), CompletenessConfig())
    assert raw.params == {"claim": "logit"}  # a CNN: no positional term, the setting is not recorded
    assert normalised.values.max() < 1e-4
    assert raw.values.median() > 1e-2  # the constant w (0.5 - m) / s offset of layer 0 is not in the map
    # With m = 0.5 the [x, 1 - x] pair has no offset: both variants are complete.
    centred = bcosified(mean=0.5)
    assert evaluate(unit_for(centred, get_method("native")), CompletenessConfig()).values.max() < 1e-4


def test_integrated_gradients_claims_f_x_minus_f_baseline():
    model = ModelAdapter("cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (8, 8))
    res = evaluate(unit_for(model, get_method("integrated_gradients", n_steps=200)), CompletenessConfig())
    assert res.params["claim"] == "logit(x) - logit(baseline)"
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


def bcos_vit(seed=0):
    torch.manual_seed(seed)
    return ModelAdapter(
        "vit",
        "bcos",
        bcos_digit_vit(depth=2, dim=32),
        bcos_inverse(1),
        10,
        (28, 28),
        is_vit=True,
        logit_bias=-math.log(9),
    )


def bcosified_vit():
    module = bcosified_digit_vit(depth=2, dim=32)
    return ModelAdapter(
        "bvit", "bcosified", module, bcos_inverse(1), 10, (28, 28), is_vit=True, logit_bias=-math.log(9)
    )


def test_positional_share_by_hand():
    share = positional_share(torch.tensor([1.0, -3.0, 2.0]), torch.tensor([4.0, 2.0, 0.0]))
    assert share[:2].tolist() == [0.25, 1.5] and math.isnan(share[2])
    with pytest.raises(ValueError, match=r"\(B,\) tensors"):
        positional_share(torch.zeros(2), torch.zeros(3))


def test_a_bcos_vit_is_complete_with_its_positional_term_and_not_without_it():
    model = bcos_vit()
    unit = unit_for(model, get_method("native"))
    separate = evaluate(unit, CompletenessConfig())
    in_claim = evaluate(unit, CompletenessConfig(positional_term="in-claim"))
    assert separate.params == {"claim": "logit - positional term", "positional_term": "separate"}
    assert in_claim.params == {"claim": "logit", "positional_term": "in-claim"}
    assert separate.values.max() < 1e-4
    share = evaluate_positional(unit, CompletenessConfig()).values
    # Held to the whole logit the map misses exactly the positional share: |sum - r| / |r| = |W(x) p| / |r|.
    torch.testing.assert_close(in_claim.values, share, rtol=1e-3, atol=1e-5)
    assert share.median() > 1e-2


def test_the_positional_term_is_per_sample_and_batch_invariant():
    """Each sample's W(x) p equals the one computed for it alone (the shared sin-cos table becomes per-sample
    leaves), and equals the oracle of test_native's leaf embedding."""
    model = bcos_vit(seed=1)
    method = get_method("native")
    x = model.encode(torch.rand(3, 1, 28, 28, generator=GEN))
    t = torch.tensor([4, 0, 9])
    batched = method.positional_term(model, x, t)
    alone = torch.cat([method.positional_term(model, x[i : i + 1], t[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-6)
    maps = method.attribute(model, x, t)
    claim = method.completeness_target(model, x, t)
    torch.testing.assert_close(maps.flatten(1).sum(1) + batched, claim, rtol=1e-4, atol=1e-5)


def test_native_normalised_on_a_bcosified_vit_closes_both_the_offset_and_the_positional_term():
    model = bcosified_vit()
    raw = evaluate(unit_for(model, get_method("native")), CompletenessConfig())
    unit = unit_for(model, get_method("native_normalised"))
    normalised = evaluate(unit, CompletenessConfig())
    assert normalised.values.max() < 1e-3  # float32 rounding of an untrained model's small logits
    assert evaluate(unit, CompletenessConfig(positional_term="in-claim")).values.median() > 1e-2
    assert raw.values.median() > 1e-3  # layer 0's offset is still outside the raw-input map
    # Both variants report the same positional term: layer 0 comes before the embeddings.
    x = model.encode(torch.rand(2, 1, 28, 28, generator=GEN))
    t = torch.tensor([1, 2])
    torch.testing.assert_close(
        get_method("native").positional_term(model, x, t), get_method("native_normalised").positional_term(model, x, t)
    )


def test_positional_share_applies_to_native_vit_rows_only():
    vit, cnn = bcos_vit(), bcosified()
    assert positional_applies(unit_for(vit, get_method("native"))) is None
    assert "no positional term on model 'bcosified'" in positional_applies(unit_for(cnn, get_method("native")))
    assert "no positional term" in positional_applies(unit_for(vit, get_method("integrated_gradients")))
    own = ModelAdapter(
        "hub", "aloe", vit.module, vit.encoding, 10, (28, 28), is_vit=True, native_explainer=lambda x, t: x
    )
    assert positional_applies(unit_for(own, get_method("native"))) is not None  # its own explainer, its own terms
    with pytest.raises(ValueError, match="unknown positional_term .nope.; valid choices: .separate., .in-claim."):
        CompletenessConfig(positional_term="nope")
