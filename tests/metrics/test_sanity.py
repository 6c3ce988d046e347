"""eMPRT and RandomLogit (metrics/sanity.py): numpy / scipy / skimage's own numbers for the pieces, Quantus'
``EfficientMPRT`` and ``RandomLogit`` on the maps they computed, and the suite's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.metrics.sanity import emprt, flat_ssim, histogram_entropy, map_similarity, other_classes


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), bins=st.sampled_from([2, 10, 100]), constant=st.booleans())
def test_histogram_entropy_is_scipys_of_numpys_histogram(seed, bins, constant):
    from scipy.stats import entropy

    gen = torch.Generator().manual_seed(seed)
    maps = torch.randn(3, 7, 7, generator=gen) ** 3  # skewed: bins of unequal counts
    if constant:
        maps[1] = 0.25
    ours = histogram_entropy(maps, bins)
    theirs = [entropy(np.histogram(m.numpy(), bins=bins)[0]) for m in maps]
    assert np.allclose(ours.numpy(), theirs, rtol=1e-12, atol=1e-12)
    assert (ours >= 0).all() and (ours <= np.log(bins) + 1e-12).all()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(7, 40))
def test_flat_ssim_is_skimages(seed, n):
    from skimage.metrics import structural_similarity

    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randn(2, n, generator=gen), torch.randn(2, n, generator=gen)
    ours = flat_ssim(a, b)
    for i in range(2):
        both = np.concatenate([a[i].numpy(), b[i].numpy()]).astype(np.float64)
        theirs = structural_similarity(a[i].double().numpy(), b[i].double().numpy(), win_size=7,
                                       data_range=float(both.max() - both.min()))  # fmt: skip
        assert ours[i].item() == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def test_emprt_by_hand_and_a_constant_map_is_undefined():
    rise, undefined = emprt(torch.tensor([[0.0, 1.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]]),
                            torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]))  # fmt: skip
    assert rise[0].item() == pytest.approx(1.0) and undefined.tolist() == [False, True]  # log 2 -> log 4


def test_other_classes_are_never_the_label_and_cover_the_rest():
    ids = torch.arange(2000)
    labels = ids % 10
    other = other_classes(ids, labels, 10, seed=0)
    assert (other != labels).all() and set(other.tolist()) == set(range(10))
    assert torch.equal(other_classes(ids[:5], labels[:5], 10, seed=0), other[:5])  # keyed by id, not position
    assert (other_classes(torch.arange(50), torch.zeros(50, dtype=torch.long), 2, seed=3) == 1).all()
    with pytest.raises(ValueError, match="at least 2 classes"):
        other_classes(ids, labels, 1, seed=0)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()


def _recording_explainer(seen: list):
    def explain_func(model, inputs, targets, **kwargs):
        x = torch.as_tensor(inputs).float().requires_grad_(True)
        t = torch.as_tensor(targets).long()
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model(x).gather(1, t.view(-1, 1)).sum(), x)
        a = (g * x).detach()
        seen.append((t.clone(), a.clone()))
        return a.numpy()

    return explain_func


def test_emprt_is_quantus_efficient_mprt_on_the_maps_it_computed():
    quantus = pytest.importorskip("quantus")
    net, seen = _net(), []
    x, t = torch.rand(4, 1, 8, 8), torch.tensor([0, 3, 1, 4])
    metric = quantus.EfficientMPRT(disable_warnings=True, display_progressbar=False)
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=t.numpy(), a_batch=None,
                               explain_func=_recording_explainer(seen), device="cpu"))  # fmt: skip
    original, randomised = seen[0][1], seen[-1][1]  # the trained model's maps, then the fully randomised one's
    rise, _ = emprt(original, randomised)
    assert np.allclose(rise.numpy(), theirs, rtol=1e-9, atol=1e-12), (rise, theirs)


def test_random_logit_quantus_ssim_is_quantus_random_logit_on_the_maps_it_computed():
    quantus = pytest.importorskip("quantus")
    net, seen = _net(), []
    x, t = torch.rand(4, 1, 8, 8), torch.tensor([0, 3, 1, 4])
    explain = _recording_explainer(seen)
    a = explain(net, x.numpy(), t.numpy())
    per_map = {"normalise_axes": [1, 2, 3]}  # its default divides by the largest |entry| of the whole batch
    metric = quantus.RandomLogit(num_classes=5, normalise_func_kwargs=per_map, disable_warnings=True,
                                 display_progressbar=False)  # fmt: skip
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=t.numpy(), a_batch=a, explain_func=explain,
                               device="cpu"))  # fmt: skip
    other, again = seen[-1]
    assert (other != t).all()
    ours = map_similarity(torch.as_tensor(a)[:, 0], again[:, 0], "quantus-ssim")
    assert np.allclose(ours.numpy(), theirs, rtol=1e-6, atol=1e-9), (ours, theirs)


def test_a_map_that_ignores_the_class_has_random_logit_one():
    a = torch.rand(3, 16, 16) + 0.1
    for similarity in ("ssim", "spearman", "quantus-ssim"):
        assert torch.allclose(map_similarity(a, a.clone(), similarity), torch.ones(3, dtype=torch.float64)), similarity


SUITE = {
    "name": "sanity", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["input_x_gradient"],
    "metrics": ["random_logit", "emprt", "randomisation"], "n_samples": 6, "batch_size": 4, "controls": False,
    "random_logit": {"max_samples": 5}, "randomisation": {"n_samples": 4, "n_depths": 2},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("sanity")
    for name, extra in (("one", {}), ("two", {"pieces": 2})):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_random_logit_and_emprt_as_the_functions_do(runs):
    """RandomLogit: the label's map against the keyed other class's, for the first max_samples; eMPRT: on the
    cascade's first n_samples, equal to the functions on maps from a model with every layer re-initialised as the
    cascade does; two pieces agree."""
    import copy

    import pandas as pd

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model
    from faithbench.models.randomise import parameter_layers, randomise_layer

    key = ["metric", "sample_id"]
    one, two = (pd.read_csv(runs / n / "samples.csv").sort_values(key).reset_index(drop=True) for n in ("one", "two"))
    assert np.allclose(one["value"], two["value"], rtol=1e-6, equal_nan=True) and one[key].equals(two[key])
    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))
    x, labels = model.encode(data.images[ids]), data.labels[ids]

    def ixg(module, inputs, targets):
        inputs = inputs.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(module(inputs).gather(1, targets.view(-1, 1)).sum(), inputs)
        return (g * inputs).sum(1).detach()

    got = one.set_index(key)["value"]
    maps = ixg(model.module, x, labels)
    other = other_classes(ids[:5], labels[:5], 10, seed=0)
    want = map_similarity(maps[:5], ixg(model.module, x[:5], other), "ssim")
    assert np.allclose(got["random_logit"].loc[ids[:5].tolist()].to_numpy(), want.numpy(), rtol=1e-4)
    module = copy.deepcopy(model.module)  # the cascade's end: every layer, top down, one generator
    gen = torch.Generator().manual_seed(0)
    for _, layer in reversed(parameter_layers(module)):
        randomise_layer(layer, "gaussian-matched", gen)
    rise, _ = emprt(maps[:4], ixg(module, x[:4], labels[:4]))
    assert np.allclose(got["emprt"].loc[ids[:4].tolist()].to_numpy(), rise.numpy(), rtol=1e-4)


def test_the_estimate_counts_what_the_run_explains(runs):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv").drop_duplicates(["model", "method", "metric"])
    cost = estimate(resolve(build_suite(SUITE, "test")), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    shared = cost.models.set_index("model").loc["cnn_mnist"]
    planned = cost.units.set_index("method").loc["input_x_gradient"]
    assert rows["model_inputs"].sum() == planned["model inputs"] + shared["shared inputs"]
    assert rows["model_calls"].sum() == planned["model calls"] + shared["shared calls"]
