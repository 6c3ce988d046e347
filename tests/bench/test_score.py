"""Tensors in, numbers out: faithbench.score gives the per-sample scores benchmark() gives for the same maps, from
tensors or arrays, channels-first or -last, a module or a function; what it cannot score is one line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import faithbench
from faithbench.attributions import get_method
from faithbench.bench.run.data import load_data
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UserError
from faithbench.models import load_model


def test_score_gives_the_per_sample_scores_of_benchmark(tmp_path):
    blur = {"baseline": "blur"}  # a per-image baseline: the suite's mean colour is the whole data set's
    metrics = ["pixel_deletion", "entropy", "comprehensiveness"]
    erasure = {**blur, "target": "label"}
    results = faithbench.benchmark(["cnn_mnist"], ["gradient"], metrics, n_samples=6, out=tmp_path, deletion=blur,
                                   erasure=erasure)  # fmt: skip
    samples = pd.read_csv(tmp_path / "samples.csv")
    model = load_model("cnn_mnist")
    data = load_data(build_suite({"name": "s", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["gini"]}))
    for metric, settings in (("pixel_deletion", blur), ("entropy", {}), ("comprehensiveness", blur)):
        rows = samples[samples["metric"] == metric].sort_values("sample_id")
        ids = torch.tensor(rows["sample_id"].to_numpy())
        x, y = model.encode(data.images[ids]), data.labels[ids]
        maps = get_method("gradient").attribute(model, x, y)
        ours = faithbench.score(model.module, x, maps, y, metric=metric, **settings)
        assert ours.numpy() == pytest.approx(rows["value"].to_numpy(), rel=1e-5, abs=1e-6), metric
        assert float(ours.mean()) == pytest.approx(float(results.set_index("metric").loc[metric, "mean"]), rel=1e-5)


def test_arrays_channels_last_and_plain_functions_give_the_same_scores():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(4 * 32 * 32, 5))
    x, a, y = torch.rand(4, 3, 32, 32), torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    first = faithbench.score(net, x, a, y, metric="pixel_insertion")
    assert first.shape == (4,) and torch.isfinite(first).all()
    last = faithbench.score(lambda z: net(z), x.permute(0, 2, 3, 1).numpy(), a.permute(0, 2, 3, 1).numpy(),
                            y.numpy(), metric="pixel_insertion")  # fmt: skip
    assert torch.equal(first, last)
    flat = faithbench.score(net, x, torch.zeros(4, 32, 32), y, metric="entropy")
    assert torch.isnan(flat).all()  # no mass: undefined, as in the results' n_undefined


def test_what_score_cannot_do_is_one_line():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 3))
    x, a, y = torch.rand(2, 1, 28, 28), torch.rand(2, 28, 28), torch.tensor([0, 1])
    with pytest.raises(
        UserError, match="metric 'gridpg' explains inputs of its own; score\\(\\) takes: pixel_deletion"
    ):
        faithbench.score(net, x, a, y, metric="gridpg")
    with pytest.raises(UserError, match="did you mean"):
        faithbench.score(net, x, a, y, metric="pixel_deleton")
    with pytest.raises(UserError, match=r"attributions \(2, 27, 28\) .* must match inputs \(2, 1, 28, 28\)"):
        faithbench.score(net, x, a[:, 1:], y, metric="entropy")
    with pytest.raises(UserError, match="block_size 16 cuts the 28 px images into 4 block"):
        faithbench.score(net, x, a, y, metric="pixel_deletion", block_size=16)
    with pytest.raises(UserError, match="unknown key"):
        faithbench.score(net, x, a, y, metric="pixel_deletion", blocksize=2)
    with pytest.raises(UserError, match="numpy array"):
        faithbench.score(net, x.tolist(), a, y, metric="entropy")
    assert np.isfinite(faithbench.score(net, x, a, y, metric="gini").numpy()).all()
