"""Continuity (metrics/continuity.py): hand-computed translations and ratios, properties, Quantus' ``Continuity`` on
the same model, inputs and explanation function, and the suite's rows (model-input and image space)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.metrics.continuity import (
    ContinuityConfig,
    continuity,
    continuity_ratios,
    fill_values,
    translate,
    translation_shifts,
    worst_step,
)


def _input(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The input itself as its explanation (summed over channels)."""
    return x.sum(1)


def test_translations_by_hand():
    x = torch.tensor([[[[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]]]).repeat(4, 1, 1, 1)  # (4, 1, 2, 3)
    fill = fill_values(x)
    assert fill.tolist() == [1.0] * 4 and fill_values(x, "white")[0] == 32 and fill_values(x, "mean")[0] == 10.5
    moved = translate(x, torch.tensor([1, -2, 3, 0]), torch.tensor([0.0, 0.0, 7.0, 0.0]))
    assert moved[0, 0].tolist() == [[0.0, 1.0, 2.0], [0.0, 8.0, 16.0]]  # right by one
    assert moved[1, 0].tolist() == [[4.0, 0.0, 0.0], [32.0, 0.0, 0.0]]  # left by two
    assert moved[2, 0].tolist() == [[7.0] * 3] * 2 and torch.equal(moved[3], x[3])  # out entirely; not moved
    down = translate(x[:1], torch.tensor([1]), torch.tensor([-1.0]), direction="y")
    assert down[0, 0].tolist() == [[-1.0, -1.0, -1.0], [1.0, 2.0, 4.0]]


def test_the_shifts_are_quantus_grid_without_zero():
    """W = 28, 28 steps (Quantus' defaults): dx = 57 // 28 = 2, shifts -26, -24, ..., 28, the 0 left out."""
    shifts = translation_shifts(28, 28)
    assert shifts == [s for s in range(-26, 29, 2) if s != 0] and len(shifts) == 27
    assert translation_shifts(3, 3) == [-1, 1, 3]  # dx = 7 // 3 = 2
    with pytest.raises(ValueError, match="n_steps must be at most 2 W \\+ 1 = 7"):
        translation_shifts(3, 8)


def test_continuity_by_hand():
    """The input as its own map (not normalised): the ratio of a step is |d|_1 / |d|_2 for d = x_k - x. x = (1, 2, 4)
    in one row, fill 1 (its minimum), 3 steps: shifts -1, 1, 3 give (2, 4, 1), (1, 1, 2), (1, 1, 1), so d = (1, 2,
    -3), (0, -1, -2), (0, -1, -3) and the ratios 6 / sqrt(14), 3 / sqrt(5), 4 / sqrt(10); the largest is the first."""
    x = torch.tensor([[[[1.0, 2.0, 4.0]]]])
    out = continuity(_input, x, torch.tensor([0]), n_steps=3, normalise=False)
    assert math.isclose(float(out.values), 6 / math.sqrt(14), rel_tol=1e-12) and not out.undefined.any()
    moved = torch.tensor([[2.0, 4.0, 1.0], [1.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    ratios = continuity_ratios(x.view(1, 3).expand(3, 3), moved, x.view(1, 3).expand(3, 3), moved, normalise=False)
    assert torch.allclose(ratios, torch.tensor([6 / 14**0.5, 3 / 5**0.5, 4 / 10**0.5], dtype=torch.float64))


def test_an_input_that_no_translation_moves_is_undefined():
    """A constant image filled with its own value: every step leaves it as it is, so no ratio has a denominator."""
    out = continuity(_input, torch.full((2, 1, 4, 4), 0.5), torch.tensor([0, 1]), n_steps=4)
    assert out.undefined.all() and out.values.isnan().all()
    some = worst_step(torch.tensor([[float("nan"), 2.0, 1.0], [float("nan")] * 3], dtype=torch.float64))
    assert some.values[0] == 2 and some.undefined.tolist() == [False, True]


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()


def _input_x_gradient(net: nn.Module):
    def explain(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(net(x).gather(1, t.view(-1, 1)).sum(), x)
        return (g * x).detach().sum(1)

    return explain


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.01, 100.0), steps=st.integers(1, 17))
def test_normalised_maps_ignore_scale_and_the_directions_are_transposes(seed, scale, steps):
    """With normalise, a map scaled by c scores the same; without, c times as much. Translating along the height is
    translating the transposed input along its width. A map that ignores the input scores 0."""
    gen = torch.Generator().manual_seed(seed)
    explain = _input_x_gradient(_net())
    x, t = torch.rand(3, 1, 8, 8, generator=gen), torch.randint(0, 5, (3,), generator=gen)
    out = continuity(explain, x, t, n_steps=steps)
    ok = ~out.undefined
    assert (out.values[ok] >= 0).all()
    scaled = continuity(lambda i, g: scale * explain(i, g), x, t, n_steps=steps)
    assert torch.allclose(scaled.values[ok], out.values[ok], rtol=1e-4)
    raw, raw_scaled = (continuity(f, x, t, n_steps=steps, normalise=False)
                       for f in (explain, lambda i, g: scale * explain(i, g)))  # fmt: skip
    assert torch.allclose(raw_scaled.values[ok], scale * raw.values[ok], rtol=1e-4)
    identity = continuity(_input, x, t, n_steps=steps, direction="y", normalise=False)
    transposed = continuity(_input, x.transpose(2, 3), t, n_steps=steps, normalise=False)
    assert torch.allclose(identity.values, transposed.values, rtol=1e-12, equal_nan=True)
    fixed = continuity(lambda i, g: torch.ones(i.shape[0], 8, 8), x, t, n_steps=steps)
    assert (fixed.values[ok] == 0).all()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), shift=st.integers(-9, 9))
def test_a_translation_and_its_inverse_keep_what_stayed_inside(seed, shift):
    x = torch.rand(2, 3, 5, 7, generator=torch.Generator().manual_seed(seed))
    s, fill = torch.tensor([shift, shift]), torch.tensor([-1.0, -2.0])
    back = translate(translate(x, s, fill), -s, fill)
    kept = (torch.arange(7) + shift >= 0) & (torch.arange(7) + shift < 7)  # the columns that never left
    assert torch.equal(back[..., kept], x[..., kept]) and (back[..., ~kept] == fill.view(2, 1, 1, 1)).all()
    assert (translate(x, s, fill) == fill.view(2, 1, 1, 1)).sum() >= min(abs(shift), 7) * 3 * 5 * 2


@pytest.mark.parametrize("steps", [4, 6, 7])
@pytest.mark.parametrize("prepared", [True, False])
def test_the_same_as_quantus_continuity(steps, prepared):
    """Quantus 0.6.0's ``Continuity`` (its black fill, x direction, nr_steps) with the same explanation function,
    conventions converted: its maps divided by their own largest |entry| (``normalise_axes`` of one map; its default
    divides by the call batch's), or neither normalised nor made positive. Its shift-0 step (ratio 0 / 1e-9 = 0) and
    its 1e-9 in the denominator change nothing at this tolerance. Inputs in [-0.5, 1.5]: the fill is each input's own
    minimum, not 0."""
    quantus = pytest.importorskip("quantus")
    net = _net()
    explain = _input_x_gradient(net)

    def explain_func(model, inputs, targets, **kwargs):
        return explain(torch.as_tensor(inputs).float(), torch.as_tensor(targets).long()).numpy()

    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(1)) * 2 - 0.5
    t = torch.tensor([0, 1, 2, 3, 4])
    kw = {"normalise_func_kwargs": {"normalise_axes": [1, 2, 3]}} if prepared else {"normalise": False, "abs": False}
    metric = quantus.Continuity(nr_steps=steps, disable_warnings=True, **kw)
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=t.numpy(), a_batch=None,
                               explain_func=explain_func, device="cpu"))  # fmt: skip
    ours = continuity(explain, x, t, n_steps=steps, normalise=prepared, absolute=prepared)
    assert not ours.undefined.any()
    assert np.allclose(ours.values.numpy(), theirs, rtol=1e-5, atol=1e-7), (ours.values, theirs)


def test_bad_settings_name_the_valid_choices():
    with pytest.raises(ValueError, match="unknown fill 'zero'; valid choices: 'black', 'white', 'mean'"):
        ContinuityConfig(fill="zero")
    with pytest.raises(ValueError, match="unknown direction 'z'; valid choices: 'x', 'y'"):
        ContinuityConfig(direction="z")
    with pytest.raises(ValueError, match="unknown space 'pixels'; valid choices: 'model-input', 'image'"):
        ContinuityConfig(space="pixels")
    with pytest.raises(ValueError, match="n_steps must be a positive integer"):
        ContinuityConfig(n_steps=0)
    with pytest.raises(ValueError, match="max_samples must be an integer >= 0"):
        ContinuityConfig(max_samples=-2)
    with pytest.raises(ValueError, match="x must be \\(B, c, H, W\\)"):
        translate(torch.zeros(2, 4, 4), torch.zeros(2), torch.zeros(2))


SUITE = {
    "name": "continuity", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["gradient", "input_x_gradient"],
    "metrics": ["continuity"], "n_samples": 6, "batch_size": 4, "controls": False,
    "continuity": {"n_steps": 5, "max_samples": 5},
}  # fmt: skip


def test_a_suite_refuses_more_steps_than_its_images_have_shifts():
    from faithbench.bench.run.suite import build_suite
    from faithbench.errors import UserError

    with pytest.raises(UserError, match="\\[continuity\\] on dataset 'mnist': n_steps must be at most 2 W \\+ 1 = 57"):
        build_suite({**SUITE, "continuity": {"n_steps": 58}}, "test")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("continuity")
    image = {"continuity": {**SUITE["continuity"], "space": "image", "fill": "white"}}
    for name, extra in (("one", {}), ("image", image)):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_continuity_as_the_function_gives_on_its_samples(runs):
    """Model-input space: the function on the encoded samples (the first max_samples), the gradient summed over
    channels; image space with the white fill: each image translated in [0, 1] (its largest value fills), encoded,
    explained, the ratio's denominator in image units."""
    import pandas as pd

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))[:5]
    images, labels = data.images[ids], data.labels[ids]

    def gradient(inputs, targets):
        x = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model.module(x).gather(1, targets.view(-1, 1)).sum(), x)
        return g.sum(1)

    want = continuity(gradient, model.encode(images), labels, n_steps=5)
    got = pd.read_csv(runs / "one" / "samples.csv").query("method == 'gradient'").set_index("sample_id")["value"]
    assert len(got) == 5 and np.allclose(got.loc[ids.tolist()].to_numpy(), want.values.numpy(), rtol=1e-5)
    want = continuity(lambda i, t: gradient(model.encode(i), t), images, labels, n_steps=5, fill="white",
                      maps=gradient(model.encode(images), labels))  # fmt: skip
    got = pd.read_csv(runs / "image" / "samples.csv").query("method == 'gradient'").set_index("sample_id")["value"]
    assert np.allclose(got.loc[ids.tolist()].to_numpy(), want.values.numpy(), rtol=1e-5)
    rows = pd.read_csv(runs / "image" / "results.csv")
    params = rows["params"]
    assert params.str.contains('"space": "image"').all() and params.str.contains("-17, -6, 5, 16, 27").all()


def test_the_estimate_counts_what_the_run_explains(runs):
    """Each of the 5 samples explained again at the 5 shifts of 5 steps over 28 px (-17, -6, 5, 16, 27). (A shift of
    the whole side leaves only the fill: equal inputs for samples of equal fill and class, whose forward pass the
    gradient family shares within a call; the estimate counts each and says so.)"""
    import pandas as pd

    from faithbench.attributions import get_method
    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.metrics.registry import METRICS
    from faithbench.metrics.spec import Unit
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv").drop_duplicates(["model", "method", "metric"])
    cost = estimate(resolve(build_suite(SUITE, "test")), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    planned = cost.units.set_index("method")
    shared = cost.models.set_index("model").loc["cnn_mnist"]
    assert rows["model_inputs"].sum() == planned["model inputs"].sum() + shared["shared inputs"]
    assert rows["model_calls"].sum() == planned["model calls"].sum() + shared["shared calls"]
    assert planned.loc["gradient", "model inputs"] == 6 + 5 * 5  # one backward pass per explanation
    unit = Unit(model=load_model("cnn_mnist"), method=get_method("gradient"), images=torch.zeros(4, 0),
                labels=torch.zeros(4), sample_ids=torch.arange(4), batch_size=4,
                device=torch.device("cpu"))  # fmt: skip
    spec = METRICS.get("continuity")
    assert "counted each" in spec.cost(unit, ContinuityConfig(n_steps=28))[-1].note  # the shift 28 = the side
    assert spec.cost(unit, ContinuityConfig(n_steps=5))[-1].note == ""
