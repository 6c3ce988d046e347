"""MoRF / LeRF / SRG pixel flipping: hand-computed curves, the SRG formula, properties, fills, one computation."""

from dataclasses import fields

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from faithbench.attributions import get_method
from faithbench.config import from_table
from faithbench.errors import UserError
from faithbench.metrics.flipping import (
    FILLS,
    FLIPPING_FRACTIONS,
    LERF,
    MORF,
    SRG,
    FlippingConfig,
    pixel_flipping,
)
from faithbench.metrics.imputation import linear_imputation
from faithbench.metrics.registry import METRICS
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import bcos_inverse, normalized
from tests.helpers import AdditiveImageModel, small_cnn

V = torch.tensor([[4.0, 3.0], [2.0, 1.0]])
X = torch.ones(1, 1, 2, 2)
T = torch.tensor([0])
QUARTERS = [0.0, 0.25, 0.5, 0.75, 1.0]
CNN = small_cnn(in_channels=1, classes=4, seed=3)


def flip(attr, **kw):
    kw.setdefault("fractions", QUARTERS)
    return pixel_flipping(AdditiveImageModel(V), X, attr.view(1, 2, 2), T, block_size=1, activation="identity", **kw)


def test_morf_lerf_and_srg_by_hand():
    res = flip(V)
    assert res.morf.curve.tolist() == [[10, 6, 3, 1, 0]]  # 4, then 3, 2, 1 removed
    assert res.lerf.curve.tolist() == [[10, 9, 7, 4, 0]]  # 1, then 2, 3, 4 removed
    assert res.morf.values.item() == pytest.approx(0.25 * (10 / 2 + 6 + 3 + 1 + 0 / 2))  # 3.75
    assert res.lerf.values.item() == pytest.approx(0.25 * (10 / 2 + 9 + 7 + 4 + 0 / 2))  # 6.25
    assert res.srg.values.item() == pytest.approx(2.5)
    assert res.srg.curve.tolist() == [[0, 3, 4, 3, 0]]


def test_srg_is_the_papers_lif_minus_mif_area_difference():
    """Blücher et al.: SRG = LIF - MIF, the areas under the least- and most-influential-first curves (here
    trapezoids on the fractions, normalised by their range)."""
    torch.manual_seed(0)
    x, a = torch.rand(4, 1, 8, 8), torch.randn(4, 8, 8)
    t = torch.tensor([0, 1, 2, 3])
    fractions = [0.0, 0.05, 0.2, 0.5, 0.9, 1.0]
    res = pixel_flipping(CNN, x, a, t, block_size=2, fractions=fractions)
    f = np.asarray(fractions)

    def area(y):
        return sum((f[i + 1] - f[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(f) - 1)) / (f[-1] - f[0])

    for i in range(4):
        mif, lif = area(res.morf.curve[i].tolist()), area(res.lerf.curve[i].tolist())
        assert res.srg.values[i].item() == pytest.approx(lif - mif, abs=1e-6)
    torch.testing.assert_close(res.srg.values, res.lerf.values - res.morf.values)


def test_lerf_removes_the_lowest_blocks_whole():
    v = torch.arange(16, dtype=torch.float).view(4, 4)
    res = pixel_flipping(
        AdditiveImageModel(v), torch.ones(1, 1, 4, 4), v.unsqueeze(0), T, block_size=2, fractions=[0, 0.25, 1.0],
        activation="identity",
    )  # fmt: skip
    # blocks: top-left 0+1+4+5 = 10 (the least), bottom-right 10+11+14+15 = 50 (the most)
    assert res.lerf.curve.tolist() == [[120, 110, 0]] and res.morf.curve.tolist() == [[120, 70, 0]]


maps = st.integers(0, 2**31 - 1).map(lambda s: torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(s)))
images = st.integers(0, 2**31 - 1).map(lambda s: torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(s)))
FEW = [0.0, 0.25, 0.5, 1.0]


@given(a=maps, x=images, block=st.sampled_from([1, 2, 3]))
def test_probability_curves_areas_and_srg_are_bounded(a, x, block):
    res = pixel_flipping(CNN, x, a, torch.tensor([1, 2]), block_size=block, fractions=FEW)
    for part in (res.morf, res.lerf):
        assert ((part.curve >= 0) & (part.curve <= 1)).all() and ((part.values >= 0) & (part.values <= 1)).all()
    assert ((res.srg.values >= -1) & (res.srg.values <= 1)).all()
    torch.testing.assert_close(res.morf.curve[:, 0], res.lerf.curve[:, 0])  # f = 0: the image itself
    torch.testing.assert_close(res.morf.curve[:, -1], res.lerf.curve[:, -1])  # f = 1: all baseline


@given(a=maps, x=images)
def test_reversing_a_map_swaps_morf_and_lerf(a, x):
    res, rev = (pixel_flipping(CNN, x, m, torch.tensor([0, 3]), block_size=2, fractions=FEW) for m in (a, -a))
    assert torch.equal(res.morf.curve, rev.lerf.curve) and torch.equal(res.lerf.curve, rev.morf.curve)
    torch.testing.assert_close(res.srg.values, -rev.srg.values)


@given(x=images, c=st.floats(-5, 5), block=st.sampled_from([1, 2, 3]))
def test_a_uniform_map_has_zero_srg(x, c, block):
    res = pixel_flipping(CNN, x, torch.full((2, 8, 8), c), torch.tensor([0, 1]), block_size=block, fractions=FEW)
    assert torch.equal(res.morf.curve, res.lerf.curve) and (res.srg.values == 0).all()


def test_logit_readout_and_channel_maps():
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    a = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    t = torch.tensor([0, 1])
    logits = pixel_flipping(CNN, x, a, t, activation="identity", block_size=2)
    with torch.no_grad():
        direct = CNN(x)[torch.arange(2), t]
    torch.testing.assert_close(logits.morf.curve[:, 0], direct)
    torch.testing.assert_close(pixel_flipping(CNN, x, a[:, 0], t, block_size=2).srg.values,
                               pixel_flipping(CNN, x, a, t, block_size=2).srg.values)  # fmt: skip
    assert logits.morf.fractions.tolist() == pytest.approx(list(FLIPPING_FRACTIONS))


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least two fractions"):
        flip(V, fractions=[0.5])
    with pytest.raises(ValueError, match="NaN/inf"):
        flip(torch.tensor([1.0, float("nan"), 0, 0]))
    with pytest.raises(ValueError, match="matching inputs"):
        pixel_flipping(CNN, X, torch.ones(1, 3, 3), T)
    with pytest.raises(ValueError, match="unknown activation"):
        pixel_flipping(CNN, X, V.unsqueeze(0), T, activation="logit")


# --------------------------------------------------------------------------- the suite's metrics


class Counting(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net, self.calls, self.seen = net, 0, []

    def forward(self, x):
        self.calls += len(x)
        self.seen.append(x.detach().clone())
        return self.net(x)


def make_unit(encoding=None, n=5, batch_size=2):
    encoding = encoding or normalized((0.5,), (0.5,))
    net = Counting(small_cnn(in_channels=encoding.channels, classes=4, seed=4))
    model = ModelAdapter("cnn", "standard", net, encoding, 4, (8, 8))
    return Unit(
        model=model,
        method=get_method("input_x_gradient"),
        images=torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(5)),
        labels=torch.tensor([0, 1, 2, 3, 0])[:n],
        sample_ids=torch.arange(n),
        batch_size=batch_size,
        device=torch.device("cpu"),
    ), net


def test_the_three_metrics_share_one_morf_and_one_lerf_computation():
    unit, net = make_unit()
    cfg = FlippingConfig(block_size=2)
    unit.sample_maps()
    net.calls = 0
    res = {spec.name: spec.evaluate(unit, cfg) for spec in (MORF, LERF, SRG)}
    assert net.calls == 2 * 5 * len(FLIPPING_FRACTIONS)  # one MoRF and one LeRF curve per sample, nothing more
    torch.testing.assert_close(res["srg"].values, res["lerf"].values - res["morf"].values)
    assert res["morf"].curve.shape == (5, 11) and res["srg"].params == res["morf"].params
    MORF.evaluate(unit, FlippingConfig(block_size=2, readout="logit"))
    assert net.calls == 4 * 5 * len(FLIPPING_FRACTIONS)  # another config: computed again
    assert {MORF.table, LERF.table, SRG.table} == {"flipping"}
    assert [METRICS[m].higher_is_better for m in ("morf", "lerf", "srg")] == [False, True, True]


@pytest.mark.parametrize("fill", FILLS)
def test_every_fill_runs_and_fills_only_removed_pixels_through_the_encoding(fill):
    unit, net = make_unit(bcos_inverse(1), n=3)
    cfg = FlippingConfig(block_size=2, fill=fill, fractions=(0.0, 0.5, 1.0), fill_value=0.25)
    res = SRG.evaluate(unit, cfg)
    assert res.values.shape == (3,) and torch.isfinite(res.values).all()
    seen = torch.cat(net.seen[-4:])  # the last model calls: perturbed images of this evaluation
    if fill != "model-input-zero":  # every other fill is an image in [x, 1 - x] form
        torch.testing.assert_close(seen[:, 1], 1 - seen[:, 0])


def test_road_fill_imputes_removed_pixels_like_the_imputer_and_noise_fill_is_keyed():
    unit, net = make_unit(n=2, batch_size=8)
    cfg = FlippingConfig(block_size=2, fill="road", road_noise=0.0, fractions=(0.0, 0.5))
    MORF.evaluate(unit, cfg)
    half = unit.model.encoding.decode(net.seen[-1])[:4][1::2]  # one call, MoRF's jobs first: f = 0.5, both samples
    removed = (half != unit.images[:2]).squeeze(1)
    expected, _, _ = linear_imputation(unit.images[:2], removed, fallback=unit.images.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(half, expected, atol=1e-5, rtol=0)
    assert removed.flatten(1).sum(1).tolist() == [32, 32]
    noise = FlippingConfig(block_size=2, fill="noise", fractions=(0.0, 1.0))
    first = MORF.evaluate(unit, noise).curve
    fresh, _ = make_unit(n=2, batch_size=1)
    fresh.model.module.load_state_dict(unit.model.module.state_dict())
    torch.testing.assert_close(MORF.evaluate(fresh, noise).curve, first)  # another chunking, the same noise


def test_config_errors_name_the_key_and_the_choices():
    with pytest.raises(UserError, match="unknown fill 'zero'; valid choices: 'mean', 'value', 'blur'"):
        from_table(FlippingConfig, {"fill": "zero"}, "[flipping]")
    with pytest.raises(UserError, match="unknown readout 'accuracy'; valid choices: 'probability', 'logit'"):
        from_table(FlippingConfig, {"readout": "accuracy"}, "[flipping]")
    with pytest.raises(UserError, match=r"fill_value must be a pixel value in \[0, 1\]"):
        from_table(FlippingConfig, {"fill_value": 2.0}, "[flipping]")
    with pytest.raises(UserError, match="road_noise must be a standard deviation"):
        from_table(FlippingConfig, {"road_noise": -1.0}, "[flipping]")
    with pytest.raises(UserError, match="block_size must be a positive integer"):
        from_table(FlippingConfig, {"block_size": 0}, "[flipping]")
    cfg = from_table(FlippingConfig, {"fractions": [0, 0.5, 1]}, "[flipping]")
    assert cfg.fractions == (0, 0.5, 1) and cfg.fill == "mean" and cfg.readout == "probability"


def test_a_variant_shares_every_field_it_does_not_name():
    named = {"name", "description", "higher_is_better", "evaluate", "curve_label"}
    for f in fields(MORF):
        same = getattr(LERF, f.name) == getattr(MORF, f.name)
        assert same != (f.name in named), f.name
    srg = (SRG.higher_is_better, SRG.table, SRG.unit, SRG.modalities, SRG.scale)
    assert srg == (True, "flipping", "AUC", ("image",), 1)
    assert SRG.curve_value_label == "p(LeRF) - p(MoRF)" and LERF.curve_value_label == MORF.curve_value_label
