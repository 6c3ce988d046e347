"""Infidelity (metrics/infidelity.py): closed forms on a linear model, properties, captum's ``infidelity`` on the same
perturbations, and Quantus' ``Infidelity`` by converting its perturbations (cumulative squares, raw differences)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.metrics.infidelity import (
    InfidelityConfig,
    infidelity,
    perturb_images,
    removed_fraction,
    square_masks,
)


def _linear(c: int = 1, h: int = 6, w: int = 6, classes: int = 3, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(c * h * w, classes, bias=False)).eval()


def _predicted(maps: torch.Tensor, fractions: torch.Tensor) -> torch.Tensor:
    return (fractions.double() * maps.double().unsqueeze(1)).sum(dim=(2, 3))


def _drops(net: nn.Module, x: torch.Tensor, perturbed: torch.Tensor, t: torch.Tensor, n: int) -> torch.Tensor:
    with torch.no_grad():
        f0 = net(x).gather(1, t.view(-1, 1)).squeeze(1)
        f = net(perturbed).gather(1, t.repeat_interleave(n).view(-1, 1)).view(len(x), n)
    return (f0.unsqueeze(1) - f).double()


@pytest.mark.parametrize("perturbation", ["square", "noisy-baseline"])
def test_input_x_gradient_of_a_linear_model_to_a_zero_baseline_has_infidelity_zero(perturbation):
    """f(x) = w . x and a = w * x: with b = 0, r = (x - x_k) / x, so sum a r = w . (x - x_k) = the drop, exactly."""
    net, n = _linear(), 5
    x, t = torch.rand(4, 1, 6, 6) + 0.1, torch.tensor([0, 1, 2, 0])
    cfg = InfidelityConfig(perturbation=perturbation, n_perturbations=n, baseline="value", square_size=0.5)
    ids, draws = torch.arange(4).repeat_interleave(n), torch.arange(n).repeat(4)
    moved = perturb_images(x.repeat_interleave(n, 0), ids, draws, torch.zeros(1, 1, 1, 1), cfg)
    maps = net[1].weight[t].view(4, 6, 6) * x[:, 0]
    fractions = removed_fraction(x.repeat_interleave(n, 0), moved, torch.zeros(1)).view(4, n, 6, 6)
    drops = _drops(net, x, moved, t, n)
    assert torch.allclose(
        infidelity(_predicted(maps, fractions), drops), torch.zeros(4, dtype=torch.float64), atol=1e-9
    )


def test_a_gradient_map_by_hand():
    """One pixel image x = (0.5, 1.0), f = 2 x1 + 3 x2, gradient a = (2, 3), baseline 0. Removing pixel 1 only: r =
    (1, 0), p = 2, d = 2 * 0.5 = 1; removing both: p = 5, d = 4. Infidelity ((2 - 1)^2 + (5 - 4)^2) / 2 = 1;
    normalised: beta = (2 + 20) / (4 + 25) = 22 / 29, ((22/29 * 2 - 1)^2 + (22/29 * 5 - 4)^2) / 2."""
    x = torch.tensor([[[[0.5, 1.0]]]])
    moved = torch.tensor([[[[0.0, 1.0]]], [[[0.0, 0.0]]]])
    fractions = removed_fraction(x.expand(2, 1, 1, 2), moved, torch.zeros(1)).view(1, 2, 1, 2)
    p = _predicted(torch.tensor([[[2.0, 3.0]]]), fractions)
    d = torch.tensor([[1.0, 4.0]], dtype=torch.float64)
    assert torch.allclose(p, torch.tensor([[2.0, 5.0]], dtype=torch.float64))
    assert float(infidelity(p, d)) == pytest.approx(1.0)
    beta = 22 / 29
    assert float(infidelity(p, d, normalize=True)) == pytest.approx(((beta * 2 - 1) ** 2 + (beta * 5 - 4) ** 2) / 2)


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(0.01, 100.0), seed=st.integers(0, 2**16))
def test_bounds_and_scaling(scale, seed):
    """>= 0; normalised, a scaled map (any sign) has the same infidelity; a negated map is allowed (signed maps)."""
    gen = torch.Generator().manual_seed(seed)
    p, d = torch.randn(3, 7, generator=gen), torch.randn(3, 7, generator=gen)
    plain = infidelity(p, d)
    assert (plain >= 0).all()
    normed = infidelity(p, d, normalize=True)
    assert torch.allclose(infidelity(scale * p, d, normalize=True), normed, rtol=1e-6, atol=1e-9)
    assert torch.allclose(infidelity(-scale * p, d, normalize=True), normed, rtol=1e-6, atol=1e-9)
    assert (normed <= plain + 1e-9).all()  # beta is the best scale, 1 among the candidates


def test_squares_lie_inside_the_image_and_have_the_asked_side():
    cfg = InfidelityConfig(square_size=0.25, n_perturbations=50)
    x = torch.rand(1, 1, 28, 28)
    moved = perturb_images(x.expand(50, 1, 28, 28), torch.zeros(50, dtype=torch.long), torch.arange(50),
                           torch.full((1, 1, 1, 1), -1.0), cfg)  # fmt: skip
    assert ((moved == -1).sum(dim=(1, 2, 3)) == 7 * 7).all()  # round(0.25 * 28) = 7 px, never clipped by the border
    assert square_masks(torch.tensor([[1, 2]]), 2, 4, 4).nonzero().tolist() == [[0, 1, 2], [0, 1, 3], [0, 2, 2],
                                                                                [0, 2, 3]]  # fmt: skip


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("perturbation", ["square", "noisy-baseline"])
def test_the_same_as_captums_infidelity(perturbation, normalize):
    from captum.attr import InputXGradient
    from captum.metrics import infidelity as captum_infidelity
    from captum.metrics import infidelity_perturb_func_decorator

    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()
    n, x, t = 6, torch.rand(3, 1, 8, 8), torch.tensor([0, 3, 1])
    base = torch.full((1, 1, 1, 1), 0.25)
    cfg = InfidelityConfig(perturbation=perturbation, n_perturbations=n, baseline="value", baseline_value=0.25)
    ids, draws = torch.tensor([7, 8, 9]).repeat_interleave(n), torch.arange(n).repeat(3)
    moved = perturb_images(x.repeat_interleave(n, 0), ids, draws, base, cfg)

    @infidelity_perturb_func_decorator(True)  # multiply_by_inputs, with the baseline
    def shared(inputs, baselines):  # captum repeats each input n times in a row: the rows above
        return moved

    attributions = InputXGradient(net).attribute(x, target=t).detach()
    theirs = captum_infidelity(net, shared, x, attributions, baselines=base.expand_as(x), target=t,
                               n_perturb_samples=n, normalize=normalize)  # fmt: skip
    fractions = removed_fraction(x.repeat_interleave(n, 0), moved, base).view(3, n, 8, 8)
    ours = infidelity(_predicted(attributions[:, 0], fractions), _drops(net, x, moved, t, n), normalize=normalize)
    assert torch.allclose(ours.float(), theirs, rtol=1e-4, atol=1e-6), (ours, theirs)


def test_quantus_infidelity_is_this_estimator_over_its_cumulative_squares():
    """Quantus 0.6.0's ``Infidelity`` (patch 4, ``perturb_baseline="black"``) sets the squares of a raster to the
    image's minimum one after another, cumulatively, multiplies the map by the raw difference x - x_k, and repeats
    that same sequence ``n_perturb_samples`` times. Given the inputs it ran (recorded), the estimator here gives its
    numbers."""
    quantus = pytest.importorskip("quantus")
    torch.manual_seed(2)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()
    seen: list[torch.Tensor] = []

    class Recorded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, inputs: torch.Tensor) -> torch.Tensor:
            seen.append(inputs.detach().clone())
            return self.net(inputs)

    x, t = torch.rand(3, 1, 8, 8), torch.tensor([2, 0, 4])
    a = torch.randn(3, 1, 8, 8)  # any signed map
    metric = quantus.Infidelity(perturb_patch_sizes=[4], n_perturb_samples=2, disable_warnings=True)
    theirs = np.asarray(metric(model=Recorded().eval(), x_batch=x.numpy(), y_batch=t.numpy(), a_batch=a.numpy(),
                               device="cpu"))  # fmt: skip
    steps = torch.stack(seen[1:5], dim=1)  # (3, 4, 1, 8, 8): the first repeat's four squares (0: the input)
    assert torch.equal(torch.stack(seen[5:9], dim=1), steps)  # the second repeat is the same sequence
    minimum = x.view(3, -1).min(dim=1).values.view(3, 1, 1, 1)
    assert torch.equal(steps[:, -1], minimum.expand(3, 1, 8, 8))  # cumulative: at the end every pixel is removed
    predicted = (a.unsqueeze(1) * (x.unsqueeze(1) - steps)).sum(dim=(2, 3, 4))  # the raw difference, not r
    ours = infidelity(predicted, _drops(net, x, steps.reshape(12, 1, 8, 8), t, 4))
    assert np.allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-6), (ours, theirs)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown perturbation 'blob'"):
        InfidelityConfig(perturbation="blob")
    with pytest.raises(ValueError, match="square_size must be a fraction"):
        InfidelityConfig(square_size=2)
    with pytest.raises(ValueError, match="unknown baseline 'model-input-zero'"):
        InfidelityConfig(baseline="model-input-zero")
    with pytest.raises(ValueError, match=r"must both be \(B, n\)"):
        infidelity(torch.zeros(2, 3), torch.zeros(2, 4))


SUITE = {
    "name": "infid", "dataset": "mnist", "models": ["cnn_mnist", "bcos_cnn_mnist"],
    "methods": ["input_x_gradient", "native"], "metrics": ["infidelity"], "n_samples": 6, "batch_size": 4,
    "controls": False, "infidelity": {"n_perturbations": 3, "max_samples": 5},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("infid")
    for name, extra in (("one", {}), ("two", {"pieces": 2})):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_what_the_functions_give_and_pieces_agree(runs):
    """Per sample, the run's infidelity of input x gradient on cnn_mnist is the functions' on the same images and
    keyed perturbations (the mean colour, encoded); two pieces give the same values."""
    import pandas as pd

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    key = ["model", "method", "sample_id"]
    one, two = (pd.read_csv(runs / n / "samples.csv").sort_values(key) for n in ("one", "two"))
    assert len(one) == 2 * 5 + 1 * 5  # cnn_mnist: input x gradient; bcos_cnn_mnist: both methods
    assert np.allclose(one["value"], two["value"], rtol=1e-5, atol=1e-9)
    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))[:5]
    images, labels, n = data.images[ids], data.labels[ids], 3
    cfg = InfidelityConfig(n_perturbations=n, max_samples=5)
    base = data.images.mean(dim=(0, 2, 3), keepdim=True)
    moved = perturb_images(images.repeat_interleave(n, 0), ids.repeat_interleave(n), torch.arange(n).repeat(5), base,
                           cfg)  # fmt: skip
    x = model.encode(images).requires_grad_(True)
    (g,) = torch.autograd.grad(model.module(x).gather(1, labels.view(-1, 1)).sum(), x)
    maps = (g * x).sum(1).detach()
    fractions = removed_fraction(images.repeat_interleave(n, 0), moved, base).view(5, n, 28, 28)
    with torch.no_grad():
        f0 = model.module(model.encode(images)).gather(1, labels.view(-1, 1))
        f = model.module(model.encode(moved)).gather(1, labels.repeat_interleave(n).view(-1, 1)).view(5, n)
    want = infidelity(_predicted(maps, fractions), (f0 - f).double())
    got = one.query("model == 'cnn_mnist'").set_index("sample_id")["value"].loc[ids.tolist()].to_numpy()
    assert np.allclose(got, want.numpy(), rtol=1e-3), (got, want)


def test_the_estimate_counts_what_the_run_computes(runs):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv")
    measured = rows.groupby("model")[["model_inputs", "model_calls"]].sum()
    models = {m: load_model(m) for m in SUITE["models"]}
    cost = estimate(resolve(build_suite(SUITE, "test")), models, 10)
    planned = cost.units.groupby("model")[["model inputs", "model calls"]].sum()
    shared = cost.models.set_index("model")
    for m in SUITE["models"]:
        inputs = planned.loc[m, "model inputs"] + shared.loc[m, "shared inputs"]
        calls = planned.loc[m, "model calls"] + shared.loc[m, "shared calls"]
        assert (measured.loc[m, "model_inputs"], measured.loc[m, "model_calls"]) == (inputs, calls), m
