"""eMPRT, sMPRT and RandomLogit (metrics/sanity.py): numpy / scipy / skimage's own numbers for the pieces, Quantus'
``EfficientMPRT`` and ``RandomLogit`` on the maps they computed, Quantus' ``SmoothMPRT`` given the same draws and
randomised layers, and the suite's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.attributions import get_method
from faithbench.metrics.imputation import hashed_normal
from faithbench.metrics.randomisation import RandomisationConfig, evaluate_spearman
from faithbench.metrics.sanity import (
    STREAM_SMPRT,
    SmoothMPRTConfig,
    emprt,
    evaluate_smprt,
    flat_ssim,
    histogram_entropy,
    map_similarity,
    noisy_copies,
    other_classes,
)
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import normalized


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


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), n_noisy=st.integers(1, 5), magnitude=st.floats(0.0, 1.0), batch=st.integers(2, 4))
def test_noisy_copies_are_keyed_by_sample_and_copy_and_the_last_is_the_input(seed, n_noisy, magnitude, batch):
    gen = torch.Generator().manual_seed(seed)
    x, ids = torch.randn(batch, 2, 3, 3, generator=gen), torch.randperm(50, generator=gen)[:batch]
    copies = noisy_copies(x, ids, n_noisy=n_noisy, magnitude=magnitude, seed=seed)
    assert copies.shape == (batch, n_noisy, 2, 3, 3) and torch.equal(copies[:, -1], x)
    # a function of (seed, sample id, copy): not of the batch, nor of how many copies follow
    assert torch.equal(noisy_copies(x[1:], ids[1:], n_noisy=n_noisy, magnitude=magnitude, seed=seed), copies[1:])
    more = noisy_copies(x, ids, n_noisy=n_noisy + 2, magnitude=magnitude, seed=seed)
    assert torch.equal(more[:, : n_noisy - 1], copies[:, :-1])
    if n_noisy > 1 and magnitude > 1e-3:
        assert not torch.equal(noisy_copies(x, ids, n_noisy=n_noisy, magnitude=magnitude, seed=seed + 1), copies)


def test_the_noise_has_the_asked_spread_of_the_input_range_and_text_padding_stays_zero():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 1, 64, 64, generator=gen) * torch.tensor([1.0, 4.0]).view(2, 1, 1, 1)  # ranges ~1 and ~4
    copies = noisy_copies(x, torch.tensor([3, 8]), n_noisy=3, magnitude=0.1, seed=0)
    span = (x.flatten(1).amax(1) - x.flatten(1).amin(1)).view(2, 1, 1, 1)
    z = ((copies[:, :-1] - x.unsqueeze(1)) / (0.1 * span.unsqueeze(1))).double()  # 2 x 8192 standard normals each
    assert z.std(dim=(1, 2, 3, 4)).sub(1).abs().max() < 0.03 and z.mean(dim=(1, 2, 3, 4)).abs().max() < 0.03
    assert abs(torch.corrcoef(z[0].reshape(2, -1))[0, 1]) < 0.05  # the copies' draws are independent
    # text (B, D, T): values in [1, 2] on 5 real positions, then 3 all-zero padding positions
    emb = 1 + torch.rand(2, 4, 8, generator=gen)
    emb[:, :, 5:] = 0
    real = (emb != 0).any(dim=1, keepdim=True)
    copies = noisy_copies(emb, torch.tensor([0, 1]), n_noisy=4, magnitude=0.5, seed=2, real=real)
    assert (copies[..., 5:] == 0).all() and (copies[:, :-1, :, :5] != emb.unsqueeze(1)[..., :5]).all()
    z = (copies[:, :-1, :, :5] - emb.unsqueeze(1)[..., :5]) / 0.5
    span = emb[..., :5].flatten(1).amax(1) - emb[..., :5].flatten(1).amin(1)  # the real positions' range, not [0, 2]
    drawn = hashed_normal(torch.tensor([0, 1]), (3, 4, 8), seed=2, stream=STREAM_SMPRT)[..., :5]
    assert torch.allclose(z.double(), drawn * span.double().view(2, 1, 1, 1), atol=1e-6)


def _image_unit(module: nn.Module, method: str, images: torch.Tensor, labels: torch.Tensor, *, batch: int = 8,
                ids: torch.Tensor | None = None) -> Unit:  # fmt: skip
    n_classes = int(labels.max()) + 1
    model = ModelAdapter("net", "standard", module, normalized((0.0,), (1.0,)), max(n_classes, 2), images.shape[-2:])
    return Unit(model=model, method=get_method(method), images=images, labels=labels,
                sample_ids=torch.arange(len(images)) if ids is None else ids, batch_size=batch,
                device=torch.device("cpu"))  # fmt: skip


def _digits(n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.rand(n, 1, 12, 12, generator=torch.Generator().manual_seed(1)), torch.arange(n) % 3


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 12 * 12, 3)).eval()  # fmt: skip


def test_smprt_of_a_linear_model_s_gradient_is_randomisation_spearman():
    """A linear model's gradient is the same at every input, so averaging it over noisy inputs changes nothing: sMPRT
    is the plain cascade's Spearman, depth by depth (the same layers, redrawn by the same generator)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(144, 8), nn.Linear(8, 3)).eval()
    images, labels = _digits()
    cascade = {"n_samples": 4, "n_depths": 2, "seed": 5}
    plain = evaluate_spearman(_image_unit(net, "gradient", images, labels), RandomisationConfig(**cascade))
    smooth = evaluate_smprt(_image_unit(net, "gradient", images, labels),
                            SmoothMPRTConfig(**cascade, n_noisy=6, noise_magnitude=0.5))  # fmt: skip
    assert torch.allclose(smooth.curve, plain.curve, atol=1e-12) and smooth.curve.shape == (4, 2)
    assert torch.equal(smooth.fractions, plain.fractions) and (smooth.values < 0.9).all()
    # input x gradient does depend on the input: the smoothed maps are other maps
    ixg = evaluate_smprt(_image_unit(net, "input_x_gradient", images, labels),
                         SmoothMPRTConfig(**cascade, n_noisy=6, noise_magnitude=0.5))  # fmt: skip
    assert not torch.allclose(ixg.curve, evaluate_spearman(_image_unit(net, "input_x_gradient", images, labels),
                                                           RandomisationConfig(**cascade)).curve)  # fmt: skip


@pytest.mark.parametrize("smoothing", [{"n_noisy": 1}, {"n_noisy": 4, "noise_magnitude": 0.0}])
def test_without_noise_smprt_is_the_plain_cascade_on_a_relu_network(smoothing):
    """One copy is the input itself (Quantus' convention: ``nr_samples = 1`` is MPRT), as is noise of magnitude 0."""
    images, labels = _digits()
    cascade = {"n_samples": 3, "n_depths": 3, "init": "default"}
    plain = evaluate_spearman(_image_unit(_conv_net(), "gradient", images, labels), RandomisationConfig(**cascade))
    smooth = evaluate_smprt(_image_unit(_conv_net(), "gradient", images, labels),
                            SmoothMPRTConfig(**cascade, **smoothing))  # fmt: skip
    assert torch.allclose(smooth.curve, plain.curve, atol=1e-9) and len(smooth.values) == 3


def test_smprt_does_not_depend_on_the_batch_and_maps_that_ignore_the_model_score_one():
    images, labels = _digits(5)
    ids = torch.tensor([4, 0, 3, 1, 2])  # ids are not positions
    cfg = SmoothMPRTConfig(n_samples=5, n_depths=2, n_noisy=3, noise_magnitude=0.3)
    one = evaluate_smprt(_image_unit(_conv_net(), "input_x_gradient", images, labels, batch=16, ids=ids), cfg)
    other = evaluate_smprt(_image_unit(_conv_net(), "input_x_gradient", images, labels, batch=4, ids=ids), cfg)
    assert torch.equal(one.sample_ids, ids) and torch.allclose(one.values, other.values, atol=1e-9)
    assert torch.isfinite(one.values).all() and (one.values < 0.9).all()
    ssim = evaluate_smprt(_image_unit(_conv_net(), "input_x_gradient", images, labels, ids=ids),
                          SmoothMPRTConfig(n_samples=5, n_depths=2, n_noisy=3, similarity="ssim"))  # fmt: skip
    assert ssim.params["similarity"] == "ssim" and not torch.allclose(ssim.values, one.values)
    for control in ("edges", "random"):  # the same draws for every model: identical smoothed maps
        res = evaluate_smprt(_image_unit(_conv_net(), control, images, labels, ids=ids), cfg)
        assert torch.allclose(res.curve, torch.ones_like(res.curve)), control


def test_smprt_settings_are_checked_and_name_the_valid_choices():
    with pytest.raises(ValueError, match="n_noisy must be a positive integer"):
        SmoothMPRTConfig(n_noisy=0)
    with pytest.raises(ValueError, match="noise_magnitude must be a number >= 0"):
        SmoothMPRTConfig(noise_magnitude=-0.1)
    with pytest.raises(ValueError, match="valid choices: 'spearman', 'ssim'"):
        SmoothMPRTConfig(similarity="quantus-ssim")
    with pytest.raises(ValueError, match="valid choices: 'gaussian-matched', 'default'"):
        SmoothMPRTConfig(init="zeros")
    assert SmoothMPRTConfig() == SmoothMPRTConfig(n_samples=16, n_depths=4, init="gaussian-matched", seed=0,
                                                  n_noisy=10, noise_magnitude=0.1, similarity="spearman")  # fmt: skip


def test_a_text_model_takes_the_noise_on_its_real_tokens_and_is_scored_over_its_tokens():
    from tests.text_helpers import random_rows, small_text_model

    model, rows = small_text_model("standard"), random_rows(4)

    def unit() -> Unit:
        return Unit(model=model, method=get_method("input_x_gradient"), images=rows,
                    labels=torch.zeros(4, dtype=torch.long), sample_ids=torch.arange(4), batch_size=5,
                    device=torch.device("cpu"))  # fmt: skip

    recorded, seen = unit(), []
    explain = recorded.explain
    recorded.explain = lambda inputs, targets, **kw: seen.append(inputs.clone()) or explain(inputs, targets, **kw)
    res = evaluate_smprt(recorded, SmoothMPRTConfig(n_samples=4, n_depths=2, n_noisy=3))
    assert res.curve.shape == (4, 2) and torch.isfinite(res.curve).all() and (res.values < 1).all()
    x = model.encode(rows)
    explained = torch.cat(seen).view(3, 4, 3, *x.shape[1:])  # (model, sample, copy, D, T): trained, 2 depths
    padding = (x == 0).all(dim=1)  # (4, T)
    moved = (explained - x.unsqueeze(1)).abs().amax(dim=3).transpose(1, 2)  # (model, copy, sample, T)
    assert padding.any() and (moved[:, :, padding] == 0).all()  # padding stays padding (all-zero)
    assert (moved[:, :2][:, :, ~padding] > 0).all() and (moved[:, 2] == 0).all()  # the last copy is the text itself
    with pytest.raises(ValueError, match="similarity 'ssim' needs image maps"):
        evaluate_smprt(unit(), SmoothMPRTConfig(similarity="ssim"))
    # one copy: randomisation's Spearman over the tokens ([CLS] / [SEP] left out)
    one = evaluate_smprt(unit(), SmoothMPRTConfig(n_samples=4, n_depths=2, n_noisy=1))
    plain = evaluate_spearman(unit(), RandomisationConfig(n_samples=4, n_depths=2))
    assert torch.allclose(one.curve, plain.curve, atol=1e-9)


def test_smprt_is_quantus_smooth_mprt_given_the_same_draws_and_randomised_layers(monkeypatch):
    """Quantus 0.6.0's ``SmoothMPRT`` (``layer_order="top_down"``: the cascade; Spearman of |maps|; its default
    normalisation divides by a positive number, which ranks ignore) on the same model and inputs, with

    - its ``np.random.randn`` draws replaced by ours (the keyed standard normals of each sample and copy, which it
      scales by ``noise_magnitude`` times the sample's range as we do; its last copy is the input, as ours),
    - its layer generator yielding our cascade's models (each layer, top down, re-initialised as ours: Quantus reseeds
      ``torch.manual_seed(seed + 1)`` before each layer's ``reset_parameters``),
    - ``quantus.explain``, which ``SmoothMPRT`` calls for every copy instead of ``explain_func``, replaced by input x
      gradient.

    Every depth's Spearman agrees. Its ``return_average_correlation`` averages the layers and its ``"original"``
    entry (it skips a key ``"orig"`` that does not exist): the similarity of two smoothings of the trained model, 1
    with the same draws; we average the depths only, so theirs = (1 + L ours) / (L + 1)."""
    quantus = pytest.importorskip("quantus")
    import copy

    from quantus.helpers.model.pytorch_model import PyTorchModel

    from faithbench.models.randomise import parameter_layers, randomise_layer

    net = _net()
    x, t = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(3)), torch.tensor([0, 3, 1, 4])
    ids = torch.tensor([6, 1, 9, 4])
    images, labels = torch.zeros(10, 1, 8, 8), torch.zeros(10, dtype=torch.long)
    images[ids], labels[ids] = x, t
    cfg = SmoothMPRTConfig(n_samples=4, n_depths=8, init="default", seed=3, n_noisy=5, noise_magnitude=0.2)
    model = ModelAdapter("net", "standard", net, normalized((0.0,), (1.0,)), 5, (8, 8))
    unit = Unit(model=model, method=get_method("input_x_gradient"), images=images, labels=labels, sample_ids=ids,
                batch_size=3, device=torch.device("cpu"))  # fmt: skip
    ours = evaluate_smprt(unit, cfg)

    draws = hashed_normal(ids, (cfg.n_noisy - 1, 1, 8, 8), seed=cfg.seed, stream=STREAM_SMPRT)  # (B, N - 1, ...)
    calls = []

    def randn(*shape):  # Quantus asks for copy n = 0 .. N - 2 of the batch, for every model in turn
        assert shape == (4, 1, 8, 8)
        calls.append(shape)
        return draws[:, (len(calls) - 1) % (cfg.n_noisy - 1)].numpy()

    def layers(self, order="top_down", seed=42):
        assert order == "top_down"
        module, gen = copy.deepcopy(self.model), torch.Generator().manual_seed(cfg.seed)
        for name, layer in reversed(parameter_layers(module)):
            randomise_layer(layer, cfg.init, gen)
            yield name, module

    def explain(model, inputs, targets, **kwargs):
        inputs = torch.as_tensor(inputs).float().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(model(inputs).gather(1, torch.as_tensor(targets).long().view(-1, 1)).sum(),
                                       inputs)  # fmt: skip
        return (g * inputs).detach().numpy()

    monkeypatch.setattr(np.random, "randn", randn)
    monkeypatch.setattr(PyTorchModel, "get_random_layer_generator", layers)
    monkeypatch.setattr(quantus, "explain", explain)
    kwargs = {"layer_order": "top_down", "nr_samples": cfg.n_noisy, "noise_magnitude": cfg.noise_magnitude,
              "disable_warnings": True, "display_progressbar": False}  # fmt: skip
    inputs = {"model": net, "x_batch": x.numpy(), "y_batch": t.numpy(), "a_batch": None, "explain_func": explain,
              "device": "cpu"}  # fmt: skip
    theirs = quantus.SmoothMPRT(**kwargs)(**inputs)
    assert len(calls) == (cfg.n_noisy - 1) * 4  # a_batch, "original" and the 2 layers: 4 smoothings of 4 copies each
    assert np.allclose(theirs.pop("original"), 1.0)
    curve = np.stack(list(theirs.values()), axis=1)
    assert curve.shape == (4, 2) and np.allclose(ours.curve.numpy(), curve, rtol=1e-6, atol=1e-9), (ours.curve, curve)
    average = np.asarray(quantus.SmoothMPRT(**kwargs, return_average_correlation=True)(**inputs))
    assert np.allclose((1 + 2 * ours.values.numpy()) / 3, average, rtol=1e-6, atol=1e-9)


SUITE = {
    "name": "sanity", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["input_x_gradient"],
    "metrics": ["random_logit", "emprt", "randomisation", "smprt"], "n_samples": 6, "batch_size": 4, "controls": False,
    "random_logit": {"max_samples": 5}, "randomisation": {"n_samples": 4, "n_depths": 2},
    "smprt": {"n_samples": 3, "n_depths": 2, "n_noisy": 3},
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("sanity")
    for name, extra in RUNS.items():
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


RUNS = {"one": {}, "two": {"pieces": 2}, "smprt": {"metrics": ["smprt"], "batch_size": 2}}  # 9 rows a model: 2 a call


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


def test_a_suite_scores_smprt_as_the_noisy_averages_of_the_cascade_by_hand(runs):
    """sMPRT's rows: the first 3 samples, each map (the trained model's and at each of the cascade's 2 depths) the mean
    of input x gradient over the 3 copies (2 with the keyed noise of 0.1 times the sample's range, then the image
    itself), scipy's Spearman of the |maps| at each depth, averaged; the same in two pieces."""
    import copy

    import pandas as pd
    from scipy.stats import spearmanr

    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.metrics.randomisation import cascade_depths
    from faithbench.models import load_model
    from faithbench.models.randomise import parameter_layers, randomise_layer

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))[:3]
    x, labels = model.encode(data.images[ids]), data.labels[ids]

    def smoothed(module: nn.Module) -> torch.Tensor:
        span = (x.flatten(1).amax(1) - x.flatten(1).amin(1)).double().view(3, 1, 1, 1)
        z = hashed_normal(ids, (2, *x.shape[1:]), seed=0, stream=6)
        maps = []
        for inputs in [(x.double() + 0.1 * span * z[:, j]).float() for j in range(2)] + [x]:
            inputs = inputs.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(module(inputs).gather(1, labels.view(-1, 1)).sum(), inputs)
            maps.append((g * inputs).sum(1).detach().double())
        return torch.stack(maps).mean(dim=0)

    original, module = smoothed(model.module), copy.deepcopy(model.module)
    layers, gen, done, curve = parameter_layers(module), torch.Generator().manual_seed(0), 0, []
    for depth in cascade_depths(len(layers), 2):
        for _, layer in reversed(layers[len(layers) - depth : len(layers) - done]):
            randomise_layer(layer, "gaussian-matched", gen)
        done, again = depth, smoothed(module)
        curve.append([spearmanr(original[i].abs().flatten(), again[i].abs().flatten()).statistic for i in range(3)])
    want = np.mean(curve, axis=0)
    for name in RUNS:
        got = pd.read_csv(runs / name / "samples.csv").query("metric == 'smprt'").set_index("sample_id")["value"]
        assert sorted(got.index) == sorted(ids.tolist()), name
        assert np.allclose(got.loc[ids.tolist()].to_numpy(), want, rtol=1e-5, atol=1e-7), (name, got, want)


@pytest.mark.parametrize("name", ["one", "smprt"])
def test_the_estimate_counts_what_the_run_explains(runs, name):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / name / "results.csv").drop_duplicates(["model", "method", "metric"])
    suite = build_suite({**SUITE, **RUNS[name]}, "test")
    cost = estimate(resolve(suite), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    shared = cost.models.set_index("model").loc["cnn_mnist"]
    planned = cost.units.set_index("method").loc["input_x_gradient"]
    assert rows["model_inputs"].sum() == planned["model inputs"] + shared["shared inputs"]
    assert rows["model_calls"].sum() == planned["model calls"] + shared["shared calls"]
