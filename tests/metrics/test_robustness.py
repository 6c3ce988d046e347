"""The robustness family (metrics/robustness.py): hand-computed cases, properties, and the same numbers as captum's
``sensitivity_max`` and Quantus' ``MaxSensitivity``, ``AvgSensitivity``, ``LocalLipschitzEstimate``,
``RelativeInputStability``, ``RelativeOutputStability`` and ``RelativeRepresentationStability`` given the same draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.metrics.robustness import (
    kept_max,
    lipschitz_ratio,
    max_avg_sensitivity,
    relative_l2,
    relative_stability,
    sensitivities,
    uniform_noise,
)


def _input_x_gradient(net: nn.Module):
    def explain(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(net(x).gather(1, t.view(-1, 1)).sum(), x)
        return (g * x).detach()

    return explain


def test_a_hand_computed_case_on_a_linear_model():
    """f(x) = W x, input x gradient a(x) = w_t * x: a(x + d) - a(x) = w_t * d. With w_t = (1, 2), x = (1, 1) and the
    draws (0.1, 0), (0, -0.1): |a(x)| = sqrt(5), the changes 0.1 and 0.2, so max 0.2 / sqrt(5), mean 0.15 / sqrt(5)."""
    net = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    explain = _input_x_gradient(net)
    x, t = torch.ones(1, 2), torch.tensor([0])
    noise = torch.tensor([[[0.1, 0.0]], [[0.0, -0.1]]])
    s, undefined = sensitivities(explain, x, t, explain(x, t), noise)
    assert torch.allclose(s, torch.tensor([[0.1, 0.2]], dtype=torch.float64) / math.sqrt(5), atol=1e-7)
    assert not undefined.any()
    inf, _ = sensitivities(explain, x, t, explain(x, t), noise, norm="inf")  # largest entry: 0.1 / 2, 0.2 / 2
    assert torch.allclose(inf, torch.tensor([[0.05, 0.1]], dtype=torch.float64), atol=1e-7)


def test_a_map_that_ignores_the_input_has_sensitivity_zero_and_a_zero_map_is_undefined():
    x, t = torch.rand(3, 1, 6, 6), torch.tensor([0, 1, 2])
    fixed = torch.rand(3, 6, 6)
    most, mean = max_avg_sensitivity(lambda inp, tg: fixed.repeat(inp.shape[0] // 3, 1, 1), x, t, n_draws=4)
    assert torch.equal(most.values, torch.zeros(3, dtype=torch.float64)) and torch.equal(mean.values, most.values)
    zero = lambda inp, tg: torch.zeros(inp.shape[0], 6, 6)  # noqa: E731
    most, _ = max_avg_sensitivity(zero, x, t, n_draws=2)
    assert most.undefined.all()


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.01, 100.0), seed=st.integers(0, 2**16), radius=st.floats(1e-3, 0.5))
def test_bounds_and_scale_invariance(scale, seed, radius):
    """max >= mean >= 0, and the ratio does not change when the method's maps are scaled."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    explain = _input_x_gradient(net)
    x, t = torch.rand(4, 1, 4, 4), torch.randint(0, 3, (4,))
    most, mean = max_avg_sensitivity(explain, x, t, radius=radius, n_draws=5)
    scaled, _ = max_avg_sensitivity(lambda i, g: scale * explain(i, g), x, t, radius=radius, n_draws=5)
    ok = ~most.undefined
    assert (most.values[ok] >= mean.values[ok] - 1e-12).all() and (mean.values[ok] >= 0).all()
    assert torch.allclose(scaled.values[ok], most.values[ok], rtol=1e-4, atol=1e-9)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()


def test_the_same_as_captums_sensitivity_max():
    from captum.attr import InputXGradient
    from captum.metrics import sensitivity_max

    net, n = _net(), 6
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([0, 3, 1])
    noise = uniform_noise((n, *x.shape), 0.02, torch.Generator().manual_seed(1), x.device)

    def shared_draws(expanded: torch.Tensor) -> torch.Tensor:  # captum repeats each input n times, in a row
        return expanded + noise.transpose(0, 1).reshape(expanded.shape)

    theirs = sensitivity_max(InputXGradient(net).attribute, x, perturb_func=shared_draws, n_perturb_samples=n, target=t)
    explain = _input_x_gradient(net)
    s, _ = sensitivities(lambda i, g: explain(i, g).sum(1), x, t, explain(x, t).sum(1), noise)  # one channel: the same
    assert torch.allclose(s.max(dim=1).values.float(), theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["MaxSensitivity", "AvgSensitivity"])
def test_the_same_as_quantus(kind):
    quantus = pytest.importorskip("quantus")
    net, n = _net(), 5
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([2, 0, 4])
    noise = uniform_noise((n, *x.shape), 0.2, torch.Generator().manual_seed(2), x.device)
    draws = iter(noise.numpy().reshape(n, 3, -1))
    explain = _input_x_gradient(net)

    def perturb(arr, indices, **kwargs):  # Quantus asks for one draw of the batch per step
        return arr + next(draws)

    def explain_func(model, inputs, targets, **kwargs):
        inp, tg = torch.as_tensor(inputs).float(), torch.as_tensor(targets).long()
        return explain(inp, tg).numpy()

    metric = getattr(quantus, kind)(nr_samples=n, perturb_func=perturb, disable_warnings=True,
                                    display_progressbar=False)  # fmt: skip
    a = explain(x, t)
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=t.numpy(), a_batch=a.numpy(),
                               explain_func=explain_func, device="cpu"))  # fmt: skip
    s, _ = sensitivities(explain, x, t, a, noise)
    ours = s.max(dim=1).values if kind == "MaxSensitivity" else s.mean(dim=1)
    assert np.allclose(ours.numpy(), theirs, rtol=1e-5, atol=1e-7), (ours, theirs)


def test_lipschitz_and_the_relative_stabilities_by_hand_on_a_linear_model():
    """f(x) = W x with W = [[1, 2], [3, 4]], input x gradient a(x) = w_t * x, x = (1, 1), t = 0, draws (0.1, 0) and
    (0, -0.1). Lipschitz: |w_t * d| / |d| = 1 and 2, so 2. RIS: the map's relative change |d / x| equals the input's,
    so 1 for every draw. ROS: |d / x| = 0.1 over |W d| = sqrt(0.1) and sqrt(0.2), so 0.1 / sqrt(0.1) = 1 / sqrt(10).
    RRS: a single layer's input is x itself, so RRS = RIS = 1."""
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    x, wt = torch.ones(2, 2), w[0].expand(2, 2)
    d = torch.tensor([[0.1, 0.0], [0.0, -0.1]])
    maps, again = wt * x, wt * (x + d)
    assert torch.allclose(lipschitz_ratio(again, maps, x + d, x), torch.tensor([1.0, 2.0], dtype=torch.float64))
    ris = relative_stability(relative_l2(again, maps), relative_l2(x + d, x))
    assert torch.allclose(ris, torch.ones(2, dtype=torch.float64))
    ros = relative_stability(relative_l2(again, maps), torch.linalg.vector_norm(d @ w.T, dim=1).double())
    assert torch.allclose(ros, torch.tensor([0.1 / math.sqrt(0.1), 0.1 / math.sqrt(0.2)], dtype=torch.float64))
    most, undefined = kept_max(ros.view(1, 2), torch.tensor([[True, True]]))
    assert math.isclose(float(most), 1 / math.sqrt(10), rel_tol=1e-6) and not undefined.any()


def test_only_draws_that_keep_the_prediction_count_and_none_kept_is_undefined():
    ratios = torch.tensor([[5.0, 1.0, 2.0], [3.0, 4.0, 9.0]], dtype=torch.float64)
    kept = torch.tensor([[False, True, True], [False, False, False]])
    most, undefined = kept_max(ratios, kept)
    assert float(most[0]) == 2.0 and undefined.tolist() == [False, True]


def test_relative_l2_floors_zero_entries_at_eps_min():
    """(new - old) / old with old's zeros at eps_min: old = (0, 2), new = (1e-6, 3) -> |(1, 0.5)| = sqrt(1.25)."""
    got = relative_l2(torch.tensor([[1e-6, 3.0]]), torch.tensor([[0.0, 2.0]]), eps_min=1e-6)
    assert math.isclose(float(got), math.sqrt(1.25), rel_tol=1e-6)


@settings(max_examples=20, deadline=None)
@given(scale=st.floats(0.01, 100.0), seed=st.integers(0, 2**16))
def test_a_map_that_ignores_the_input_is_perfectly_stable_and_the_relative_ones_ignore_scale(scale, seed):
    gen = torch.Generator().manual_seed(seed)
    maps, again = torch.rand(4, 5, 5, generator=gen) + 0.1, torch.rand(4, 5, 5, generator=gen) + 0.1
    x, d = torch.rand(4, 1, 5, 5, generator=gen), torch.rand(4, 1, 5, 5, generator=gen) * 0.1 + 0.01
    assert torch.equal(lipschitz_ratio(maps, maps, x + d, x), torch.zeros(4, dtype=torch.float64))
    assert torch.equal(relative_l2(maps, maps), torch.zeros(4, dtype=torch.float64))
    assert torch.allclose(relative_l2(scale * again, scale * maps), relative_l2(again, maps), rtol=1e-5)
    assert torch.allclose(lipschitz_ratio(scale * again, scale * maps, x + d, x),
                          scale * lipschitz_ratio(again, maps, x + d, x), rtol=1e-5)  # fmt: skip


def _quantus_inputs(n: int, radius: float, seed: int):
    net = _net()
    x, t = torch.rand(3, 1, 8, 8), torch.tensor([2, 0, 4])
    noise = uniform_noise((n, *x.shape), radius, torch.Generator().manual_seed(seed), x.device)
    draws = iter(noise.numpy().reshape(n, 3, -1))
    explain = _input_x_gradient(net)

    def perturb(arr, indices, **kwargs):  # Quantus asks for one draw of the batch per step
        return arr + next(draws)

    def explain_func(model, inputs, targets, **kwargs):
        return explain(torch.as_tensor(inputs).float(), torch.as_tensor(targets).long()).numpy()

    return net, x, t, noise, perturb, explain_func, explain


@pytest.mark.parametrize("kind", ["LocalLipschitzEstimate", "RelativeInputStability", "RelativeOutputStability",
                                  "RelativeRepresentationStability"])  # fmt: skip
def test_lipschitz_and_the_relative_stabilities_are_quantus_given_the_same_draws(kind):
    """Quantus 0.6.0 with its maps unnormalised (LocalLipschitzEstimate's ``normalise=False``) and no prediction
    change among the draws (noise of 0.01: Quantus' relative stabilities would give NaN to a sample with one)."""
    quantus = pytest.importorskip("quantus")
    n = 4
    net, x, t, noise, perturb, explain_func, explain = _quantus_inputs(n, 0.01, 3)
    kw = {"nr_samples": n, "perturb_func": perturb, "disable_warnings": True, "display_progressbar": False}
    if kind == "LocalLipschitzEstimate":
        kw |= {"normalise": False, "return_nan_when_prediction_changes": True}
    if kind == "RelativeRepresentationStability":
        kw |= {"layer_names": ["2"]}  # the Flatten: the input of the last Linear
    a = explain(x, t)
    metric = getattr(quantus, kind)(**kw)
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=t.numpy(), a_batch=a.numpy(),
                               explain_func=explain_func, device="cpu"))  # fmt: skip
    perturbed = (x.unsqueeze(0) + noise).reshape(n * 3, *x.shape[1:])
    again, maps = explain(perturbed, t.repeat(n)), a.repeat(n, 1, 1, 1)
    with torch.no_grad():
        h, h0 = net(perturbed), net(x).repeat(n, 1)
        rep, rep0 = net[:3](perturbed), net[:3](x).repeat(n, 1)
    assert torch.equal(h.argmax(1), h0.argmax(1))  # every draw keeps the prediction
    map_rel = relative_l2(again, maps)
    ratios = {
        "LocalLipschitzEstimate": lipschitz_ratio(again, maps, perturbed, x.repeat(n, 1, 1, 1)),
        "RelativeInputStability": relative_stability(map_rel, relative_l2(perturbed, x.repeat(n, 1, 1, 1))),
        "RelativeOutputStability": relative_stability(map_rel, torch.linalg.vector_norm(h - h0, dim=1).double()),
        "RelativeRepresentationStability": relative_stability(map_rel, relative_l2(rep, rep0)),
    }[kind]
    ours, _ = kept_max(ratios.view(n, 3).T, torch.ones(3, n, dtype=torch.bool))
    assert np.allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-7), (ours, theirs)


def test_bad_arguments_are_refused():
    x, t = torch.rand(2, 1, 4, 4), torch.tensor([0, 1])
    ident = lambda i, g: i[:, 0]  # noqa: E731
    with pytest.raises(ValueError, match="norm must be one of fro, inf"):
        sensitivities(ident, x, t, x[:, 0], torch.zeros(1, 2, 1, 4, 4), norm="l1")
    with pytest.raises(ValueError, match="disagree"):
        sensitivities(ident, x, t, x[:, 0], torch.zeros(1, 3, 1, 4, 4))
    with pytest.raises(ValueError, match="radius must be > 0"):
        max_avg_sensitivity(ident, x, t, radius=0.0)
    with pytest.raises(ValueError, match="n_draws must be a positive integer"):
        max_avg_sensitivity(ident, x, t, n_draws=0)


def test_the_config_takes_a_peer_preset_and_its_own_numbers_over_it():
    from faithbench.metrics.robustness import RobustnessConfig

    assert (RobustnessConfig().radius, RobustnessConfig().n_draws) == (0.02, 10)  # captum's sensitivity_max
    assert (RobustnessConfig(preset="quantus").radius, RobustnessConfig(preset="quantus").n_draws) == (0.2, 200)
    assert RobustnessConfig(preset="quantus", n_draws=20).n_draws == 20
    with pytest.raises(ValueError, match="unknown preset 'xplique'; valid choices: 'captum', 'quantus'"):
        RobustnessConfig(preset="xplique")
    with pytest.raises(ValueError, match="max_samples must be an integer >= 0"):
        RobustnessConfig(max_samples=-1)


SUITE = {
    "name": "sens", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["gradient", "input_x_gradient"],
    "metrics": ["max_sensitivity", "avg_sensitivity", "local_lipschitz", "relative_input_stability",
                "relative_output_stability", "relative_representation_stability"],
    "n_samples": 6, "batch_size": 4, "controls": False,
    "robustness": {"n_draws": 3, "radius": 0.05, "max_samples": 5, "space": "image"},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("sens")
    model_input = {"robustness": {**SUITE["robustness"], "space": "model-input"}}
    for name, extra in (("one", {}), ("two", {"pieces": 2}), ("input", model_input)):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_what_the_function_gives_on_its_samples_and_pieces_agree(runs):
    """The run's per-sample values are the function's on the same images, draws keyed by sample id (noise on the
    image, then the model's encoding), and two pieces give the same values (their batches round alike)."""
    import pandas as pd

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.metrics.robustness import RobustnessConfig, keyed_noise
    from faithbench.models import load_model

    key = ["method", "metric", "sample_id"]
    one, two = (pd.read_csv(runs / n / "samples.csv").sort_values(key) for n in ("one", "two"))
    assert len(one) == 2 * 6 * 5 and one[key].reset_index(drop=True).equals(two[key].reset_index(drop=True))
    assert np.allclose(one["value"], two["value"], rtol=1e-6, atol=0)  # a piece's batches round alike to float32
    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))
    images, labels = data.images[ids], data.labels[ids]

    def gradient(inputs, targets):
        x = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model.module(x).gather(1, targets.view(-1, 1)).sum(), x)
        return g.sum(1)

    cfg = RobustnessConfig(n_draws=3, radius=0.05, max_samples=5, space="image")
    ids, images, labels = ids[:5], images[:5], labels[:5]  # the first max_samples of the suite's samples
    noise = keyed_noise(ids, tuple(images.shape[1:]), cfg, torch.device("cpu"))
    s, _ = sensitivities(gradient, images, labels, gradient(model.encode(images), labels), noise,
                         perturb=lambda i, d: model.encode(i + d))  # fmt: skip
    got = one[one.method == "gradient"].set_index(["metric", "sample_id"])["value"]
    assert np.allclose(got["max_sensitivity"].loc[ids.tolist()].to_numpy(), s.max(dim=1).values.numpy(), rtol=1e-4)
    assert np.allclose(got["avg_sensitivity"].loc[ids.tolist()].to_numpy(), s.mean(dim=1).numpy(), rtol=1e-4)
    # space = "model-input": the same draws added to what the model reads
    x = model.encode(images)
    s, _ = sensitivities(gradient, x, labels, gradient(x, labels), noise)
    got = pd.read_csv(runs / "input" / "samples.csv").query("method == 'gradient'").set_index(["metric", "sample_id"])
    assert np.allclose(got["value"]["max_sensitivity"].loc[ids.tolist()].to_numpy(), s.max(dim=1).values.numpy(),
                       rtol=1e-4)  # fmt: skip
    rows = pd.read_csv(runs / "input" / "results.csv")
    assert rows["params"].str.contains('"space": "model-input"').all() and len(rows) > 0


def test_a_suite_scores_lipschitz_and_the_relative_stabilities_over_the_draws_that_keep_the_prediction(runs):
    """The family's other four in the run equal a hand computation on the same draws (noise on the image): the
    maps and the input of the model's last parameterised layer before and after each draw, the maximum over the draws
    whose predicted class is the unperturbed one."""
    import pandas as pd

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.metrics.robustness import RobustnessConfig, keyed_noise
    from faithbench.models import load_model
    from faithbench.models.randomise import parameter_layers

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))[:5]
    images, labels, n = data.images[ids], data.labels[ids], 3
    cfg = RobustnessConfig(n_draws=n, radius=0.05, max_samples=5, space="image")
    moved = images.unsqueeze(0) + keyed_noise(ids, tuple(images.shape[1:]), cfg, torch.device("cpu"))
    moved = moved.transpose(0, 1).reshape(5 * n, *images.shape[1:])  # sample-major, as the run's rows
    base = images.repeat_interleave(n, dim=0)
    seen = []
    hook = parameter_layers(model.module)[-1][1].register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    with torch.no_grad():
        h0, h = model.module(model.encode(base)), model.module(model.encode(moved))
    hook.remove()

    def gradient(inputs, targets):
        x = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model.module(x).gather(1, targets.view(-1, 1)).sum(), x)
        return g.sum(1).double()

    t = labels.repeat_interleave(n)
    maps, again = gradient(model.encode(base), t), gradient(model.encode(moved), t)
    flat = lambda v: v.reshape(len(v), -1).double()  # noqa: E731
    rel = lambda new, old: torch.linalg.norm(flat(new - old) / flat(old).where(flat(old) != 0, 1e-6), dim=1)  # noqa: E731
    map_rel = rel(again, maps)
    expected = {
        "local_lipschitz": torch.linalg.norm(flat(again - maps), dim=1) / torch.linalg.norm(flat(moved - base), dim=1),
        "relative_input_stability": map_rel / rel(moved, base).clamp(min=1e-6),
        "relative_output_stability": map_rel / torch.linalg.norm(flat(h - h0), dim=1).clamp(min=1e-6),
        "relative_representation_stability": map_rel / rel(seen[1], seen[0]).clamp(min=1e-6),
    }
    kept = (h.argmax(1) == h0.argmax(1)).view(5, n)
    got = pd.read_csv(runs / "one" / "samples.csv").query("method == 'gradient'").set_index(["metric", "sample_id"])
    for metric, ratios in expected.items():
        want = ratios.view(5, n).where(kept, -torch.inf).max(dim=1).values
        want = want.where(kept.any(dim=1), torch.nan).numpy()
        assert np.allclose(got["value"][metric].loc[ids.tolist()].to_numpy(), want, rtol=1e-3, equal_nan=True), metric


def test_the_estimate_counts_what_the_run_explains(runs):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv").drop_duplicates(["model", "method", "metric"])
    measured = rows.groupby("method")[["model_inputs", "model_calls"]].sum()
    cost = estimate(resolve(build_suite(SUITE, "test")), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    planned = cost.units.set_index("method")
    shared = cost.models.set_index("model").loc["cnn_mnist"]
    for method in ("gradient", "input_x_gradient"):
        first = method == "gradient"  # it pays the work the model's units share
        inputs = measured.loc[method, "model_inputs"] - (shared["shared inputs"] if first else 0)
        calls = measured.loc[method, "model_calls"] - (shared["shared calls"] if first else 0)
        assert (inputs, calls) == (planned.loc[method, "model inputs"], planned.loc[method, "model calls"]), method


def test_a_text_model_takes_the_noise_on_its_real_token_embeddings_and_compares_maps_over_its_tokens():
    """Text: the draws land on the embeddings the model reads, at its real positions only (padding stays all-zero,
    so it stays padding), and the maps compare over the tokens ([CLS] / [SEP] left out, as every text metric)."""
    from faithbench.attributions import get_method
    from faithbench.metrics.registry import METRICS
    from faithbench.metrics.robustness import RobustnessConfig, keyed_noise
    from faithbench.metrics.spec import Unit
    from tests.text_helpers import sentence, small_text_model

    model = small_text_model("standard")
    rows = torch.tensor([sentence(5, 6, 7, 8, length=8), sentence(9, 10, length=8), sentence(11, 12, 13, length=8)])
    labels = torch.tensor([0, 2, 1])
    unit = Unit(model=model, method=get_method("input_x_gradient"), images=rows, labels=labels,
                sample_ids=torch.arange(3), batch_size=2, device=torch.device("cpu"))  # fmt: skip
    cfg = RobustnessConfig(n_draws=4, radius=0.1)
    got = {m: METRICS.get(m).evaluate(unit, cfg) for m in ("max_sensitivity", "local_lipschitz")}
    assert "embeddings" in got["max_sensitivity"].params["noise_on"]

    x = model.encode(rows)  # (B, D, T)
    real = (x != 0).any(dim=1, keepdim=True).float()
    assert real[1, 0, 4:].eq(0).all()  # sentence 2 is padded
    features = model.feature_mask(rows).float()
    noise = keyed_noise(torch.arange(3), tuple(x.shape[1:]), cfg, torch.device("cpu")) * real  # (n, B, D, T)

    def ixg(inputs, targets):
        e = inputs.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model.module(e).gather(1, targets.view(-1, 1)).sum(), e)
        return (g * e).sum(1).detach()

    maps = ixg(x, labels) * features
    again = torch.stack([ixg(x + d, labels) * features for d in noise])  # (n, B, T)
    change = torch.linalg.vector_norm((again - maps).double(), dim=2) / torch.linalg.vector_norm(maps.double(), dim=1)
    assert torch.allclose(got["max_sensitivity"].values, change.max(dim=0).values, rtol=1e-4)
    lipschitz = torch.linalg.vector_norm((again - maps).double(), dim=2) / torch.linalg.vector_norm(
        noise.flatten(2).double(), dim=2
    )
    kept = torch.stack([model.module(x + d).argmax(1) == model.module(x).argmax(1) for d in noise])
    want = lipschitz.where(kept, -torch.inf).max(dim=0).values
    assert torch.allclose(got["local_lipschitz"].values[kept.any(0)], want[kept.any(0)], rtol=1e-4)
    with pytest.raises(ValueError, match="space = 'image' needs image models"):
        METRICS.get("max_sensitivity").evaluate(unit, RobustnessConfig(space="image"))
