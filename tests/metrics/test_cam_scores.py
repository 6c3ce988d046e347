"""Average Drop / Increase in Confidence and ADCC (metrics/cam_scores.py) and the effective complexity
(metrics/complexity.py): hand-computed cases, properties, torch-cam's ``ClassificationMetric``, Quantus'
``EffectiveComplexity``, the suite's rows and the run's estimate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from faithbench.metrics.cam_scores import (
    CamScoreConfig,
    adcc,
    drop_and_increase,
    mask_coherency,
    mask_complexity,
    positive_mask,
)
from faithbench.metrics.complexity import effective_complexity


def test_drop_and_increase_by_hand():
    """Y = 0.8 -> O = 0.6: a quarter of the probability lost, no increase; Y = 0.5 -> O = 0.7: no drop, an increase;
    an unchanged probability neither drops nor increases."""
    drop, increase = drop_and_increase(torch.tensor([0.8, 0.5, 0.3]), torch.tensor([0.6, 0.7, 0.3]))
    assert torch.allclose(drop, torch.tensor([25.0, 0.0, 0.0], dtype=torch.float64))
    assert increase.tolist() == [0.0, 100.0, 0.0]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.01, 100.0))
def test_the_mask_is_in_unit_range_and_ignores_the_maps_scale(seed, scale):
    gen = torch.Generator().manual_seed(seed)
    maps = torch.randn(3, 7, 7, generator=gen)
    mask, empty = positive_mask(maps, (7, 7))
    assert mask.min() >= 0 and torch.allclose(mask.flatten(1).amax(dim=1), torch.ones(3)) and not empty.any()
    assert torch.allclose(positive_mask(scale * maps, (7, 7))[0], mask, atol=1e-6)
    assert positive_mask(maps, (14, 14))[0].shape == (3, 1, 14, 14)  # upsampled to the image


def test_a_map_without_positive_entries_keeps_nothing_and_is_undefined():
    mask, empty = positive_mask(-torch.rand(2, 4, 4), (4, 4))
    assert torch.equal(mask, torch.zeros(2, 1, 4, 4)) and empty.all()


def test_adcc_and_its_components_by_hand():
    """Sample 1: masks of two pixels each, overlapping in one (r = 0: coherency 1/2), half the image kept (complexity
    1/2), Y = 0.8 -> O = 0.4 (a drop of 1/2): ADCC = 3 / (2 + 2 + 2) = 1/2. Sample 2: the masked image's mask is the
    mask halved (r = 1), complexity (1 + 0.5) / 4, no drop: ADCC = 3 / (1 + 1 / 0.625 + 1) = 5/6."""
    before = torch.tensor([[[1.0, 1.0], [0.0, 0.0]], [[1.0, 0.5], [0.0, 0.0]]])
    after = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.5, 0.25], [0.0, 0.0]]])
    coherency, undefined = mask_coherency(before, after)
    assert torch.allclose(coherency, torch.tensor([0.5, 1.0], dtype=torch.float64)) and not undefined.any()
    complexity = mask_complexity(before)
    assert torch.allclose(complexity, torch.tensor([0.5, 0.375], dtype=torch.float64))
    drop, _ = drop_and_increase(torch.tensor([0.8, 0.5]), torch.tensor([0.4, 0.6]))
    assert torch.allclose(adcc(coherency, complexity, drop / 100), torch.tensor([0.5, 5 / 6], dtype=torch.float64))


def test_adcc_is_zero_where_a_component_is_at_its_worst_and_undefined_without_a_correlation():
    worst = adcc(torch.tensor([0.0, 0.8, 0.8]), torch.tensor([0.2, 1.0, 0.2]), torch.tensor([0.2, 0.2, 1.0]))
    assert worst.tolist() == [0.0, 0.0, 0.0]
    mask = torch.tensor([[[1.0, 0.0], [0.5, 0.0]]])
    for flat in (torch.zeros(1, 2, 2), torch.ones(1, 2, 2)):  # nothing kept / everything kept alike
        coherency, undefined = mask_coherency(mask, flat)
        assert undefined.item() and coherency.isnan().item()
        assert mask_coherency(flat, mask)[1].item()


def test_coherency_is_the_reference_codes_scipy_pearson_rescaled():
    """aimagelab/ADCC's coherency: ``scipy.stats.pearsonr`` of the two flattened maps, ``(r + 1) / 2``."""
    from scipy import stats

    gen = torch.Generator().manual_seed(3)
    before, after = torch.rand(5, 1, 9, 9, generator=gen), torch.rand(5, 1, 9, 9, generator=gen) ** 3
    ours, _ = mask_coherency(before, after)
    pairs = zip(before.flatten(1).numpy(), after.flatten(1).numpy(), strict=True)
    theirs = [(stats.pearsonr(a, b)[0] + 1) / 2 for a, b in pairs]
    assert np.allclose(ours.numpy(), theirs, rtol=1e-6)


def _parts(draw_maps, draw_again, drop):
    mask, _ = positive_mask(draw_maps, (8, 8))
    again, _ = positive_mask(draw_again, (8, 8))
    coherency, undefined = mask_coherency(mask, again)
    complexity = mask_complexity(mask)
    return coherency, undefined, complexity, adcc(coherency, complexity, drop)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), scale=st.floats(0.01, 100.0), low=st.sampled_from([4, 8]))
def test_adcc_is_in_unit_range_between_its_parts_and_ignores_the_maps_scale(seed, scale, low):
    """Coherency, complexity and ADCC lie in [0, 1]; ADCC, a harmonic mean, lies between its smallest and largest
    part; multiplying either map by a positive number changes none of them (the masks are scaled to [0, 1])."""
    gen = torch.Generator().manual_seed(seed)
    maps, again = torch.randn(4, low, low, generator=gen), torch.randn(4, low, low, generator=gen)
    maps[:, 0, 0], again[:, 0, 0] = 1.0, 1.0  # a positive entry each: the masks are not empty
    drop = torch.rand(4, generator=gen, dtype=torch.float64)
    coherency, undefined, complexity, score = _parts(maps, again, drop)
    assert not undefined.any()
    for value in (coherency, complexity, score):
        assert ((value >= 0) & (value <= 1)).all()
    parts = torch.stack([coherency, 1 - complexity, 1 - drop])
    assert (score >= parts.amin(dim=0) - 1e-12).all() and (score <= parts.amax(dim=0) + 1e-12).all()
    scaled = _parts(scale * maps, again / scale, drop)
    for ours, theirs in zip((coherency, complexity, score), (scaled[0], scaled[2], scaled[3]), strict=True):
        assert torch.allclose(ours, theirs, atol=1e-6)


def _control_unit(method: str):
    from faithbench.attributions import get_method
    from faithbench.metrics.spec import Unit
    from tests.attributions.test_methods import MODELS

    images = torch.rand(3, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    return Unit(model=MODELS["cnn"], method=get_method(method), images=images, labels=torch.tensor([0, 1, 2]),
                sample_ids=torch.arange(3), batch_size=2, device=torch.device("cpu"))  # fmt: skip


def test_a_map_that_ignores_the_image_is_coherent_and_a_constant_one_is_undefined():
    """The ``centre`` control draws the same prior on the masked image: coherency 1, ADCC from the complexity and
    the drop alone. The ``uniform`` control keeps everything: complexity 1, and no correlation, so coherency and
    ADCC are undefined."""
    from faithbench.metrics.cam_scores import ADCC, ADCC_COHERENCY, ADCC_COMPLEXITY, AVERAGE_DROP

    cfg = CamScoreConfig()
    centre = _control_unit("centre")
    coherency = ADCC_COHERENCY.evaluate(centre, cfg)
    assert torch.allclose(coherency.values, torch.ones(3, dtype=torch.float64)) and not coherency.undefined.any()
    complexity, drop = ADCC_COMPLEXITY.evaluate(centre, cfg).values, AVERAGE_DROP.evaluate(centre, cfg).values
    want = 3 / (1 + 1 / (1 - complexity) + 1 / (1 - drop / 100))
    assert torch.allclose(ADCC.evaluate(centre, cfg).values, want)
    assert centre.explain_time.keys() == {"samples", "adcc"}  # one re-explanation, timed on its own
    uniform = _control_unit("uniform")
    assert torch.equal(ADCC_COMPLEXITY.evaluate(uniform, cfg).values, torch.ones(3, dtype=torch.float64))
    for spec in (ADCC, ADCC_COHERENCY):
        result = spec.evaluate(uniform, cfg)
        assert result.undefined.all() and result.values.isnan().all()


def test_effective_complexity_by_hand_and_its_properties():
    maps = torch.tensor([[[1.0, -0.5], [1e-7, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    out = effective_complexity(maps)
    assert out.values[0] == 2 and out.undefined.tolist() == [False, True] and out.values[1].isnan()
    assert effective_complexity(maps[:1], eps=0.6).values.item() == 1  # only |1.0| is above 0.6 of the max
    assert effective_complexity(3 * maps[:1]).values.item() == 2  # invariant to scale
    mask = torch.tensor([[[True, False], [True, True]]])
    assert effective_complexity(maps[:1], feature_mask=mask).values.item() == 1  # -0.5 is not a feature
    with pytest.raises(ValueError, match="eps must be >= 0"):
        effective_complexity(maps, eps=-1.0)


def test_effective_complexity_is_quantus_with_one_map_at_a_time():
    """Quantus 0.6.0's EffectiveComplexity divides by the batch's largest |a| by default; normalised per map
    (``normalise_axes``), its counts are these."""
    quantus = pytest.importorskip("quantus")
    gen = torch.Generator().manual_seed(0)
    maps = torch.randn(4, 1, 8, 8, generator=gen) ** 5  # heavy tails: some entries below 1e-5 of the max
    x = torch.rand(4, 1, 8, 8).numpy()
    metric = quantus.EffectiveComplexity(normalise_func_kwargs={"normalise_axes": [1, 2, 3]}, disable_warnings=True)
    theirs = np.asarray(metric(model=None, x_batch=x, y_batch=np.zeros(4, dtype=int), a_batch=maps.numpy(),
                               device="cpu"))  # fmt: skip
    ours = effective_complexity(maps[:, 0]).values
    assert np.array_equal(ours.numpy(), theirs.astype(np.float32)), (ours, theirs)


SUITE = {
    "name": "cam", "dataset": "mnist", "models": ["cnn_mnist", "bcos_cnn_mnist"], "methods": ["gradcam", "native"],
    "metrics": ["average_drop", "increase_in_confidence", "adcc", "adcc_coherency", "adcc_complexity",
                "effective_complexity"], "n_samples": 6, "batch_size": 4, "controls": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    out = tmp_path_factory.mktemp("cam") / "run"
    run(build_suite(SUITE, "test"), out, device="cpu", progress=False)
    return out


def test_a_suite_scores_average_drop_as_the_functions_do(run_dir):
    """GradCAM on cnn_mnist: the image masked by the map's positive part (image space), the label's softmax
    probability before and after."""
    import pandas as pd

    from faithbench.attributions import get_method
    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))
    images, labels = data.images[ids], data.labels[ids]
    maps = get_method("gradcam").attribute(model, model.encode(images), labels)
    mask, _ = positive_mask(maps, (28, 28))
    with torch.no_grad():
        y = model.module(model.encode(images)).softmax(1).gather(1, labels.view(-1, 1)).squeeze(1)
        o = model.module(model.encode(images * mask)).softmax(1).gather(1, labels.view(-1, 1)).squeeze(1)
    drop, increase = drop_and_increase(y, o)
    got = pd.read_csv(run_dir / "samples.csv").query("model == 'cnn_mnist' and method == 'gradcam'")
    got = got.set_index(["metric", "sample_id"])["value"]
    assert np.allclose(got["average_drop"].loc[ids.tolist()].to_numpy(), drop.numpy(), rtol=1e-4, atol=1e-6)
    assert np.array_equal(got["increase_in_confidence"].loc[ids.tolist()].to_numpy(), increase.numpy())
    rows = pd.read_csv(run_dir / "results.csv")
    assert set(rows.metric) == set(SUITE["metrics"])


@pytest.mark.parametrize(("model_name", "method"), [("cnn_mnist", "gradcam"), ("bcos_cnn_mnist", "native")])
def test_a_suite_scores_adcc_as_the_functions_do(run_dir, model_name, method):
    """The mask of each sample's map; the map of the image seen through it (image space, encoded) for the same
    label, and its mask; their coherency, the first mask's complexity and the Average Drop (softmax, or sigmoid for
    the B-cos model) make ADCC; the rows report them in % (``scale``)."""
    import pandas as pd

    from faithbench.activations import to_probabilities
    from faithbench.attributions import get_method
    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    suite = build_suite(SUITE, "test")
    data, model, explainer = load_data(suite), load_model(model_name), get_method(method)
    ids = sample_ids(suite, len(data.labels))
    images, labels = data.images[ids], data.labels[ids]
    mask, _ = positive_mask(explainer.attribute(model, model.encode(images), labels), (28, 28))
    masked = model.encode(images * mask)
    again, _ = positive_mask(explainer.attribute(model, masked, labels), (28, 28))
    coherency, undefined = mask_coherency(mask, again)
    with torch.no_grad():
        y, o = (to_probabilities(model.module(x), model.activation).gather(1, labels.view(-1, 1)).squeeze(1)
                for x in (model.encode(images), masked))  # fmt: skip
    drop, _ = drop_and_increase(y, o)
    want = {"adcc": adcc(coherency, mask_complexity(mask), drop / 100), "adcc_coherency": coherency,
            "adcc_complexity": mask_complexity(mask)}  # fmt: skip
    samples = pd.read_csv(run_dir / "samples.csv").query(f"model == '{model_name}' and method == '{method}'")
    got = samples.set_index(["metric", "sample_id"])["value"]
    assert not undefined.any()
    for name, values in want.items():
        reported = got[name].loc[ids.tolist()].to_numpy() / 100  # the rows are in % (the metrics' scale)
        assert np.allclose(reported, values.numpy(), rtol=1e-4, atol=1e-6), name
    rows = pd.read_csv(run_dir / "results.csv").query(f"model == '{model_name}' and method == '{method}'")
    mean = rows.set_index("metric")["mean"]
    assert mean["adcc"] == pytest.approx(100 * want["adcc"].mean().item(), rel=1e-4)


def test_two_pieces_score_adcc_as_one(run_dir, tmp_path):
    """Each piece re-explains its own samples (its positions among the suite's): the rows are the one piece's."""
    import pandas as pd

    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    metrics = ["adcc", "adcc_coherency", "adcc_complexity"]
    spec = {**SUITE, "models": ["cnn_mnist"], "methods": ["gradcam"], "metrics": metrics, "pieces": 2}
    run(build_suite(spec, "test"), tmp_path / "two", device="cpu", progress=False)
    key = ["metric", "sample_id"]
    one = pd.read_csv(run_dir / "samples.csv").query("model == 'cnn_mnist' and method == 'gradcam'")
    one = one[one.metric.isin(metrics)].sort_values(key).reset_index(drop=True)
    two = pd.read_csv(tmp_path / "two" / "samples.csv").sort_values(key).reset_index(drop=True)
    assert one[key].equals(two[key]) and len(two) == 3 * SUITE["n_samples"]
    assert np.allclose(one["value"], two["value"], rtol=1e-6, atol=1e-9)


def test_the_estimate_counts_what_the_run_did(run_dir):
    """Every metric of the suite (the ADCC re-explanations included): the dry run's model inputs and calls are the
    run's."""
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(run_dir / "results.csv").drop_duplicates(["model", "method", "metric"])
    models = {name: load_model(name) for name in SUITE["models"]}
    inputs, calls = estimate(resolve(build_suite(SUITE, "test")), models, 10).total()
    assert rows["model_inputs"].sum() == inputs and rows["model_calls"].sum() == calls
    paid = rows.set_index(["model", "method", "metric"])["model_inputs"].unstack()
    assert (paid["adcc"] > 0).all() and (paid["adcc_coherency"] == 0).all()  # the first to re-explain pays for all


class _GivenCams:
    """A torch-cam CAM extractor (``torchcam.metrics._CAMExtractor``'s protocol) whose CAMs are given: the masks
    faithbench computes, already at the input's size and in [0, 1], so torch-cam neither rescales nor resizes them
    (its bilinear resize to the same size is the identity)."""

    def __init__(self, model: torch.nn.Module, cams: torch.Tensor, class_idx: list[int]):
        self.model, self.cams, self.class_idx = model, cams, class_idx

    def __call__(self, class_idx=None, scores=None, normalized=True, **kwargs):
        assert class_idx == self.class_idx  # the classes we explain, not torch-cam's default (the top class)
        return [self.cams]

    def fuse_cams(self, cams):
        return cams[0]

    def _hooks_off(self):
        import contextlib

        return contextlib.nullcontext()


@pytest.mark.parametrize(("model_name", "method"), [("cnn_mnist", "gradcam"), ("bcos_cnn_mnist", "native")])
def test_average_drop_and_increase_in_confidence_agree_with_torchcam(model_name, method):
    """torch-cam 0.5.0's ``ClassificationMetric`` on the same model, inputs, classes and CAMs. Conventions converted:
    its CAMs are our masks (it would min-max them at the CAM's resolution, then upsample; we upsample, then divide the
    positive part by its max), it multiplies what the model reads (our ``space = "model-input"``), its ``logits_fn``
    is the model's activation (softmax; sigmoid for B-cos), and it reports fractions with ``Y + 1e-7`` as the drop's
    denominator (ours: %, ``Y``): the drops agree to that 1e-7, per sample."""
    torchcam_metrics = pytest.importorskip("torchcam.metrics")
    from functools import partial

    from faithbench.activations import to_probabilities
    from faithbench.attributions import get_method
    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.metrics.cam_scores import AVERAGE_DROP, INCREASE_IN_CONFIDENCE
    from faithbench.metrics.spec import Unit
    from faithbench.models import load_model

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model(model_name)
    ids = sample_ids(suite, len(data.labels))
    images, labels = data.images[ids], data.labels[ids]
    unit = Unit(model=model, method=get_method(method), images=images, labels=labels, sample_ids=torch.arange(len(ids)),
                batch_size=4, device=torch.device("cpu"))  # fmt: skip
    cfg = CamScoreConfig(space="model-input")
    drop, increase = AVERAGE_DROP.evaluate(unit, cfg), INCREASE_IN_CONFIDENCE.evaluate(unit, cfg)
    assert not drop.undefined.any()

    x = model.encode(images)
    cams = positive_mask(unit.sample_maps(), tuple(x.shape[-2:]))[0][:, 0]
    readout = partial(to_probabilities, activation=model.activation)
    theirs = []
    for i in range(len(ids)):  # one sample per update: its summary is that sample's terms
        extractor = _GivenCams(model.module, cams[i : i + 1], [int(labels[i])])
        metric = torchcam_metrics.ClassificationMetric(extractor, readout)
        metric.update(x[i : i + 1], class_idx=[int(labels[i])])
        theirs.append(metric.summary())
    their_drop = torch.tensor([t["avg_drop"] for t in theirs], dtype=torch.float64)
    their_increase = torch.tensor([t["conf_increase"] for t in theirs], dtype=torch.float64)
    assert torch.allclose(drop.values / 100, their_drop, rtol=1e-5, atol=1e-6), (drop.values / 100, their_drop)
    assert torch.equal(increase.values / 100, their_increase)
    assert (their_drop > 0).any() and (their_drop < 1).all()  # a comparison of real drops, not of zeros
