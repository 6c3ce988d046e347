"""Average Drop / Increase in Confidence (metrics/cam_scores.py) and the effective complexity (metrics/complexity.py):
hand-computed cases, properties, Quantus' ``EffectiveComplexity``, and the suite's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from faithbench.metrics.cam_scores import drop_and_increase, positive_mask
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
    "metrics": ["average_drop", "increase_in_confidence", "effective_complexity"], "n_samples": 6, "batch_size": 4,
    "controls": False,
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
    assert set(rows.metric) == {"average_drop", "increase_in_confidence", "effective_complexity"}
