"""Comprehensiveness / sufficiency: hand-computed answers on an additive model, conventions, errors."""

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.metrics.erasure import (
    COMPREHENSIVENESS,
    ERASURE_SUMMARIES,
    ErasureConfig,
    comprehensiveness_sufficiency,
)
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import normalized
from tests.helpers import AdditiveImageModel, AdditiveTokenModel, small_cnn

# Token values: mask id 0 is worth 0; ids 1..4 are worth 4, 3, 2, 1.
VALUES = torch.tensor([0.0, 4.0, 3.0, 2.0, 1.0, 0.5])
MODEL = AdditiveTokenModel(VALUES)
IDS = torch.tensor([[1, 2, 3, 4]])
ATTR = VALUES[IDS]  # a perfect explanation of the additive model


def run(ids=IDS, attr=ATTR, **kw):
    kw.setdefault("targets", torch.zeros(ids.shape[0], dtype=torch.long))
    kw.setdefault("activation", "identity")
    return comprehensiveness_sufficiency(MODEL, ids, attr, baseline=0, **kw)


def test_eraser_aopc_by_hand():
    # n = 4, k = max(1, floor(4 r)) for r in .01 .05 .1 .2 .5 -> 1 1 1 1 2; p(x) = 10.
    res = run()
    assert res.original_probability.tolist() == [10.0]
    # Removing the top 1 leaves 6 (comp 4), the top 2 leaves 3 (comp 7).
    assert res.comprehensiveness.curve.tolist() == [[4, 4, 4, 4, 7]]
    # Keeping the top 1 gives 4 (suff 6), the top 2 gives 7 (suff 3).
    assert res.sufficiency.curve.tolist() == [[6, 6, 6, 6, 3]]
    assert res.comprehensiveness.values.item() == pytest.approx(4.6)
    assert res.sufficiency.values.item() == pytest.approx(5.4)


def test_bcos_lm_trapezoid_by_hand():
    # r = .1 .. .9 -> k = 1 1 1 1 2 2 2 3 3; comp = 4 4 4 4 7 7 7 9 9.
    res = run(summary="bcos-lm")
    assert res.comprehensiveness.curve.tolist() == [[4, 4, 4, 4, 7, 7, 7, 9, 9]]
    # Trapezoid with dr = 0.1, not divided by the 0.8 range.
    expected = 0.1 * (4 / 2 + 4 + 4 + 4 + 7 + 7 + 7 + 9 + 9 / 2)
    assert res.comprehensiveness.values.item() == pytest.approx(expected)
    suff = [10 - 4, 6, 6, 6, 10 - 7, 3, 3, 10 - 9, 1]
    assert res.sufficiency.curve[0].tolist() == pytest.approx(suff)


def test_reversed_explanation_scores_worse_on_both():
    good, bad = run(), run(attr=-ATTR)
    assert good.comprehensiveness.values > bad.comprehensiveness.values
    assert good.sufficiency.values < bad.sufficiency.values


def test_special_tokens_are_never_ranked_and_sufficiency_masking_follows_the_summary():
    # [CLS]-like position 0 holds id 5 (worth 0.5) but is not a feature.
    ids = torch.tensor([[5, 1, 2, 3, 4]])
    attr = torch.tensor([[100.0, 4, 3, 2, 1]])  # a huge score on the special token must be ignored
    features = torch.tensor([[False, True, True, True, True]])
    eraser = run(ids, attr, feature_mask=features)
    assert eraser.comprehensiveness.curve.tolist() == [[4, 4, 4, 4, 7]]
    # ERASER keeps the special token in sufficiency: keep top-1 -> 4 + 0.5.
    assert eraser.sufficiency.curve[0, 0].item() == pytest.approx(10.5 - 4.5)
    bcos = run(ids, attr, feature_mask=features, summary="bcos-lm")
    assert bcos.sufficiency.curve[0, 0].item() == pytest.approx(10.5 - 4.0)
    override = run(ids, attr, feature_mask=features, summary="bcos-lm", mask_special_in_sufficiency=False)
    assert override.sufficiency.curve[0, 0].item() == pytest.approx(10.5 - 4.5)


def test_fraction_rounding_and_top_k():
    ids = torch.tensor([[1, 2, 3, 4, 4, 4, 4, 4, 4, 4]])  # n = 10
    attr = VALUES[ids] - torch.arange(10) * 1e-3  # break ties deterministically
    res = run(ids, attr, fractions=[0.1, 0.25, 0.5], min_k=1)
    # k = floor(10 r) = 1, 2, 5: removed values 4, 7, 4+3+2+1+1 = 11.
    assert res.comprehensiveness.curve[0].tolist() == pytest.approx([4, 7, 11])
    res = run(ids, attr, top_k=[3])
    assert res.comprehensiveness.curve[0].tolist() == pytest.approx([9])
    with pytest.raises(ValueError, match="larger than the number of features"):
        run(ids, attr, top_k=[11])
    with pytest.raises(ValueError, match="either fractions or top_k"):
        run(ids, attr, top_k=[1], fractions=[0.5])


def test_predicted_class_is_the_default_target():
    res = comprehensiveness_sufficiency(MODEL, IDS, ATTR, baseline=0, activation="identity")
    # Class 0 scores 10 > class 1's 0, so the predicted class is 0.
    assert res.original_probability.item() == 10.0


def test_images_use_a_baseline_on_every_channel():
    v = torch.tensor([[4.0, 3.0], [2.0, 1.0]])
    model = AdditiveImageModel(v)
    x = torch.ones(1, 3, 2, 2)
    res = comprehensiveness_sufficiency(
        model, x, v.unsqueeze(0), torch.tensor([0]), activation="identity", fractions=[0.25, 0.5]
    )
    # 3 channels: removing the top pixel removes 3 * 4.
    assert res.comprehensiveness.curve.tolist() == [[12.0, 21.0]]


def test_side_inputs_are_gathered_per_chunk():
    seen = []

    def forward(ids, weight):
        seen.append(weight[:, 0].tolist())
        return MODEL(ids) * weight

    ids = IDS.repeat(3, 1)
    w = torch.tensor([[1.0], [2.0], [3.0]])
    res = comprehensiveness_sufficiency(
        forward,
        ids,
        ATTR.repeat(3, 1),
        torch.zeros(3, dtype=torch.long),
        baseline=0,
        activation="identity",
        extra={"weight": w},
        chunk_size=4,
    )
    assert res.original_probability.tolist() == [10.0, 20.0, 30.0]
    assert res.comprehensiveness.values.tolist() == pytest.approx([4.6, 9.2, 13.8])
    assert max(len(s) for s in seen) == 4


def test_chunking_and_batching_do_not_change_results():
    torch.manual_seed(0)
    model = small_cnn(classes=3)
    x = torch.rand(5, 1, 8, 8)
    a = torch.randn(5, 8, 8)
    t = torch.tensor([0, 1, 2, 0, 1])
    full = comprehensiveness_sufficiency(model, x, a, t, chunk_size=1000)
    tiny = comprehensiveness_sufficiency(model, x, a, t, chunk_size=3)
    torch.testing.assert_close(full.comprehensiveness.curve, tiny.comprehensiveness.curve)
    alone = comprehensiveness_sufficiency(model, x[2:3], a[2:3], t[2:3])
    torch.testing.assert_close(full.sufficiency.curve[2:3], alone.sufficiency.curve)


def test_bad_inputs():
    with pytest.raises(ValueError, match="NaN/inf"):
        run(attr=torch.tensor([[1.0, float("nan"), 0, 0]]))
    with pytest.raises(ValueError, match="selects no feature in samples \\[0\\]"):
        run(feature_mask=torch.zeros(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="unknown comprehensiveness/sufficiency summary 'aopc'"):
        run(summary="aopc")
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\]"):
        run(fractions=[0.0, 0.5])
    with pytest.raises(ValueError, match="strictly increasing"):
        run(fractions=[0.5, 0.2])
    with pytest.raises(ValueError, match="trailing dims"):
        run(attr=torch.ones(1, 5))
    with pytest.raises(ValueError, match="targets must have shape"):
        run(targets=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="at least 2 fractions"):
        run(summary="bcos-lm", fractions=[0.5])
    with pytest.raises(ValueError, match="unknown activation"):
        run(activation="tanh")
    with pytest.raises(ValueError, match=r"class indices in 0..1 \(the model has 2 outputs\); got \[5\]"):
        run(targets=torch.tensor([5]))


def test_bcos_lm_area_refuses_absolute_top_k():
    # The area is taken over fractions; over k = 1..9 it would be ~10x too large (5.42 vs 0.54).
    ids = torch.arange(1, 6).repeat(1, 2)
    attr = VALUES[ids]
    with pytest.raises(ValueError, match="area over the fractions r = k / n; with absolute top_k"):
        run(ids, attr, summary="bcos-lm", top_k=range(1, 10))
    assert run(ids, attr, top_k=range(1, 10)).comprehensiveness.values.shape == (1,)  # eraser: mean over k


def test_summary_presets_match_the_protocol():
    assert ERASURE_SUMMARIES["eraser"].fractions == (0.01, 0.05, 0.1, 0.2, 0.5)
    assert ERASURE_SUMMARIES["bcos-lm"].fractions == pytest.approx([0.1 * i for i in range(1, 10)])
    assert ERASURE_SUMMARIES["bcos-lm"].mask_special_in_sufficiency


def test_predicted_target_reuses_the_label_maps_and_explains_only_the_other_samples():
    model = ModelAdapter("cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (8, 8))
    images = torch.rand(10, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    predicted = model.module(model.encode(images)).argmax(1)
    labels = predicted.clone()
    labels[[1, 4, 7]] = (labels[[1, 4, 7]] + 1) % 4  # three samples the model gets "wrong"
    method = get_method("input_x_gradient")
    seen = []
    unit = Unit(
        model=model,
        method=method,
        images=images,
        labels=labels,
        sample_ids=torch.arange(10),
        batch_size=4,
        device=torch.device("cpu"),
    )
    unit.explain = lambda x, t: (seen.append(len(x)), method.attribute(model, x, t))[1]
    maps = unit.sample_maps("predicted")
    assert seen == [4, 4, 2, 3]  # the label maps in batches of 4, then only the 3 mispredicted samples
    torch.testing.assert_close(maps, method.attribute(model, model.encode(images), predicted))
    torch.testing.assert_close(unit.sample_targets("predicted"), predicted)
    assert set(unit.explain_time) == {"samples", "samples:predicted"}
    res = COMPREHENSIVENESS.evaluate(unit, ErasureConfig())
    assert res.params["target"] == "predicted" and res.explained == "samples:predicted"
    assert (
        unit.explanation_seconds("samples:predicted")
        == unit.explain_time["samples"] + unit.explain_time["samples:predicted"]
    )
