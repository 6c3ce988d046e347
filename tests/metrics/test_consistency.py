"""Consistency (metrics/consistency.py): hand-computed cases, properties against the definition's pairwise count,
Quantus' ``Consistency`` on the same model, inputs and maps, and the suite's rows (one piece and two)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from faithbench.metrics.consistency import (
    DISCRETISATIONS,
    ConsistencyConfig,
    consistency,
    consistency_scores,
    discretised,
    prepared,
)


def test_consistency_by_hand():
    """Explanations A A A B B C, predictions 0 0 1 2 2 0: the first two share theirs with two others, one of which has
    their prediction (1/2); the third with two others, none of them predicting 1 (0); the B pair agree (1); C is
    alone (undefined, where Quantus says 0)."""
    e = torch.tensor([[1, 0], [1, 0], [1, 0], [0, 1], [0, 1], [1, 1]])
    out = consistency_scores(e, torch.tensor([0, 0, 1, 2, 2, 0]))
    assert out.values[:5].tolist() == [0.5, 0.5, 0.0, 1.0, 1.0] and out.values[5].isnan()
    assert out.undefined.tolist() == [False] * 5 + [True]


def test_the_discretisations_by_hand():
    """top_n_sign reads the first n entries (not the n largest); rank orders from the largest; top_n_positions is the
    set of the n largest; floating_points rounds; normalise divides by the largest |entry| before any of them."""
    a = torch.tensor([[[-2.0, 0.0], [1.0, 4.0]]])  # flattened: -2, 0, 1, 4; prepared: 0.5, 0, 0.25, 1
    flat = prepared(a)
    assert flat.tolist() == [[0.5, 0.0, 0.25, 1.0]]
    assert discretised(flat, "top_n_sign", top_n=2).tolist() == [[1.0, 0.0]]  # the first two, not 4 and -2
    assert discretised(prepared(a, absolute=False), "sign").tolist() == [[-1.0, 0.0, 1.0, 1.0]]
    assert discretised(flat, "rank").tolist() == [[3, 0, 2, 1]]
    assert discretised(flat, "top_n_positions", top_n=2).tolist() == [[True, False, False, True]]
    assert discretised(torch.tensor([[0.123, 0.456]]), "floating_points", decimals=1).tolist() == [
        pytest.approx([0.1, 0.5])
    ]
    assert prepared(a, normalise=False).tolist() == [[2.0, 0.0, 1.0, 4.0]]


def test_the_default_is_quantus_top_n_sign_which_sees_only_the_first_entries():
    """Two maps that differ everywhere but in their first five entries are one explanation under Quantus' default,
    and two under ``sign``."""
    a = torch.zeros(2, 4, 4)
    a[0, 2:, 2:], a[1, 2:, :2] = 1.0, 1.0
    assert consistency(a, torch.tensor([0, 1])).values.tolist() == [0.0, 0.0]  # one explanation, two predictions
    assert consistency(a, torch.tensor([0, 1]), discretise="sign").undefined.all()


def _pairwise(explanations: torch.Tensor, predictions: torch.Tensor) -> list[float]:
    """The definition, sample by sample, pair by pair."""
    out = []
    for i in range(len(predictions)):
        same = [j for j in range(len(predictions)) if j != i and torch.equal(explanations[j], explanations[i])]
        agree = [j for j in same if predictions[j] == predictions[i]]
        out.append(len(agree) / len(same) if same else float("nan"))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 24), kinds=st.integers(1, 4), classes=st.integers(1, 4))
def test_the_grouping_is_the_pairwise_definition_and_ignores_order_and_class_names(seed, n, kinds, classes):
    gen = torch.Generator().manual_seed(seed)
    e = torch.randint(0, kinds, (n, 3), generator=gen)
    p = torch.randint(0, classes, (n,), generator=gen)
    out = consistency_scores(e, p)
    assert np.allclose(out.values.numpy(), _pairwise(e, p), equal_nan=True)
    assert torch.equal(out.undefined, out.values.isnan())
    assert ((out.values[~out.undefined] >= 0) & (out.values[~out.undefined] <= 1)).all()
    order = torch.randperm(n, generator=gen)
    assert torch.equal(consistency_scores(e[order], p[order]).values.nan_to_num(-1), out.values[order].nan_to_num(-1))
    renamed = torch.randperm(4, generator=gen)[p]  # another name for each class
    assert torch.equal(consistency_scores(e, renamed).values.nan_to_num(-1), out.values.nan_to_num(-1))
    same = consistency_scores(e, torch.zeros(n, dtype=torch.long))  # one prediction for all: 1 wherever defined
    assert (same.values[~same.undefined] == 1).all()


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), power=st.integers(-10, 10), how=st.sampled_from(DISCRETISATIONS))
def test_normalised_maps_ignore_their_scale(seed, power, how):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 5, 5, generator=gen).repeat(3, 1, 1)  # three explanations, three times each
    p = torch.randint(0, 2, (9,), generator=gen)
    out = consistency(a, p, discretise=how)
    scaled = consistency(a * 2.0**power, p, discretise=how)  # a power of two: the same normalised maps, bit for bit
    assert torch.equal(out.values.nan_to_num(-1), scaled.values.nan_to_num(-1))


def _quantus_case():
    """A linear model on 40 inputs (its predictions spread over 3 classes) and maps built from 4 prototypes (zeros in
    the first row in different places), each scaled, some with one entry raised (floating_points and rank then tell
    them apart) and the first one drawn on its own."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(40, 1, 8, 8, generator=gen) * 2 - 1
    protos = torch.randn(4, 8, 8, generator=gen)
    protos[1, 0, :3], protos[2, 0, 2:5], protos[3, 0, 0] = 0.0, 0.0, 0.0
    maps = protos[torch.randint(0, 4, (40,), generator=gen)] * (torch.rand(40, 1, 1, generator=gen) + 0.5)
    maps[::5, 4, 4] += 3.0
    maps[0] = torch.randn(8, 8, generator=gen)
    return net, x, maps


@pytest.mark.parametrize("how", ["top_n_sign", "sign", "floating_points", "rank"])
@pytest.mark.parametrize("absolute", [True, False])
def test_the_same_as_quantus_consistency(how, absolute):
    """Quantus 0.6.0's ``Consistency`` with the discretise_func of the same name (its default n: 5 entries, 2
    decimals), given the maps; conventions converted: its maps divided by their own largest |entry|
    (``normalise_axes`` of one map: its default divides by the batch's), one call batch of all 40 samples (its
    default compares within batches of 64); it predicts the classes itself (argmax of the softmax: ours, of the
    logits). A sample alone with its explanation: Quantus 0 (0 / 1e-9), here undefined."""
    quantus = pytest.importorskip("quantus")
    from quantus.functions import discretise_func

    net, x, maps = _quantus_case()
    with torch.no_grad():
        predictions = net(x).argmax(1)
    assert len(predictions.unique()) == 3
    per_map = {"normalise_axes": [1, 2, 3]}
    metric = quantus.Consistency(discretise_func=getattr(discretise_func, how), abs=absolute,
                                 normalise_func_kwargs=per_map, disable_warnings=True)  # fmt: skip
    theirs = np.asarray(metric(model=net, x_batch=x.numpy(), y_batch=predictions.numpy(), a_batch=maps.numpy(),
                               device="cpu", batch_size=len(x)))  # fmt: skip
    ours = consistency(maps, predictions, discretise=how, absolute=absolute)
    defined = ~ours.undefined.numpy()
    assert defined.sum() >= 30 and len(np.unique(theirs.round(6))) >= 4  # not a trivial case
    assert np.allclose(ours.values.numpy()[defined], theirs[defined], rtol=1e-7, atol=1e-9), (ours, theirs)
    assert (theirs[~defined] == 0).all()


def test_bad_settings_name_the_valid_choices():
    with pytest.raises(ValueError, match="unknown discretise 'hash'; valid choices: 'top_n_sign', 'sign'"):
        ConsistencyConfig(discretise="hash")
    with pytest.raises(ValueError, match="unknown target 'other'; valid choices: 'label', 'predicted'"):
        ConsistencyConfig(target="other")
    with pytest.raises(ValueError, match="top_n must be a positive integer"):
        ConsistencyConfig(top_n=0)
    with pytest.raises(ValueError, match="decimals must be an integer >= 0"):
        ConsistencyConfig(decimals=-1)
    with pytest.raises(ValueError, match="explanations must be"):
        consistency_scores(torch.zeros(3, 2), torch.zeros(2, dtype=torch.long))


SUITE = {
    "name": "consistency", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["gradient", "gradcam"],
    "metrics": ["consistency"], "n_samples": 8, "batch_size": 4, "controls": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from faithbench.bench.run.runner import run
    from faithbench.bench.run.suite import build_suite

    root = tmp_path_factory.mktemp("consistency")
    for name, extra in (("one", {}), ("two", {"pieces": 2})):
        run(build_suite({**SUITE, **extra}, "test"), root / name, device="cpu", progress=False)
    return root


def test_a_suite_scores_consistency_over_the_pieces_samples(runs):
    """The rows are the pairwise definition on the methods' maps of the suite's samples (Quantus' top_n_sign of the
    prepared maps, by hand) and the model's predictions; with two pieces, over each piece's samples (every second)."""
    import pandas as pd

    from faithbench.attributions import get_method
    from faithbench.bench.run.data import load_data
    from faithbench.bench.run.runner import sample_ids
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    suite = build_suite(SUITE, "test")
    data, model = load_data(suite), load_model("cnn_mnist")
    ids = sample_ids(suite, len(data.labels))
    x, labels = model.encode(data.images[ids]), data.labels[ids]
    with torch.no_grad():
        predictions = model.module(x).argmax(1)
    for method in ("gradient", "gradcam"):
        maps = get_method(method).attribute(model, x, labels).reshape(len(ids), -1)
        peak = maps.abs().amax(dim=1, keepdim=True)
        first_five = (maps / peak.where(peak > 0, 1.0)).abs()[:, :5].sign()
        for name, parts in (("one", [torch.arange(8)]), ("two", [torch.arange(0, 8, 2), torch.arange(1, 8, 2)])):
            rows = pd.read_csv(runs / name / "samples.csv").query(f"method == '{method}'").set_index("sample_id")
            for part in parts:
                want = _pairwise(first_five[part], predictions[part])
                got = rows["value"].loc[ids[part].tolist()].to_numpy()
                assert np.allclose(got, want, equal_nan=True), (method, name, got, want)
    results = pd.read_csv(runs / "two" / "results.csv")
    assert results["params"].str.contains('"pieces": 2').all() and results["params"].str.contains("top_n_sign").all()


def test_the_estimate_counts_what_the_run_explains(runs):
    import pandas as pd

    from faithbench.bench.estimate.counts import estimate
    from faithbench.bench.run.plan import resolve
    from faithbench.bench.run.suite import build_suite
    from faithbench.models import load_model

    rows = pd.read_csv(runs / "one" / "results.csv").drop_duplicates(["model", "method", "metric"])
    cost = estimate(resolve(build_suite(SUITE, "test")), {"cnn_mnist": load_model("cnn_mnist")}, 10)
    shared = cost.models.set_index("model").loc["cnn_mnist"]
    planned = cost.units.set_index("method")
    assert shared["shared inputs"] == 8  # the samples' predictions, once for both methods
    assert rows["model_inputs"].sum() == planned["model inputs"].sum() + shared["shared inputs"]
    assert rows["model_calls"].sum() == planned["model calls"].sum() + shared["shared calls"]


def test_score_gives_consistency_of_given_maps():
    """``faithbench.score``: the maps given, the predictions from the model."""
    import faithbench

    net, x, maps = _quantus_case()
    with torch.no_grad():
        predictions = net(x).argmax(1)
    got = faithbench.score(net, x, maps, torch.zeros(40, dtype=torch.long), metric="consistency", discretise="sign")
    want = consistency(maps, predictions, discretise="sign").values
    assert np.allclose(got.numpy(), want.numpy(), equal_nan=True)
