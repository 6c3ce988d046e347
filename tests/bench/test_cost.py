"""The cost columns: outermost model calls and the inputs they carried."""

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.bench.run.counters import measuring
from tests.attributions.test_methods import MODELS


def test_calls_and_inputs_count_outermost_forward_passes_including_deeplifts_baselines():
    model = MODELS["cnn"]
    x = model.encode(torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0)))
    targets = torch.arange(6)
    with measuring(model.module, torch.device("cpu")) as cost:
        get_method("gradient").attribute(model, x, targets, max_batch=4)
    assert (cost.model_calls, cost.model_inputs) == (2, 6)
    with measuring(model.module, torch.device("cpu")) as cost:
        get_method("deeplift").attribute(model, x, targets, max_batch=4)  # inputs and baselines: 2 per input
    assert (cost.model_calls, cost.model_inputs) == (3, 12)
    with pytest.raises(ValueError, match="max_batch must be an integer >= 2 for method 'deeplift'"):
        get_method("deeplift").attribute(model, x, targets, max_batch=1)


def test_lime_rejects_a_non_positive_ridge_alpha():
    with pytest.raises(ValueError, match="ridge_alpha must be > 0"):
        get_method("lime", ridge_alpha=0.0)


def test_explanation_cost_per_input_and_relative_to_native():
    import pandas as pd

    from faithbench.bench.report.cost import explanation_cost

    rows = [  # model, method, metric's explanation, time, n, n_dropped
        ("m", "native", "samples", 0.5, 50, 0),
        ("m", "native", "gridpg", 9.0, 90, 0),  # grid explanations: not per input
        ("m", "lime", "samples:predicted", 60.0, 48, 2),
        ("m", "lime", "samples", 40.0, 50, 0),  # the least over the per-sample rows
    ]
    frame = pd.DataFrame(rows, columns=["model", "method", "explained", "explain_time_s", "n", "n_dropped"])
    table = explanation_cost(frame).set_index("method")
    assert table.loc["native", "s_per_input"] == pytest.approx(0.01)
    assert table.loc["lime", "s_per_input"] == pytest.approx(0.8)
    assert table.loc["lime", "x_native"] == pytest.approx(80.0)
    assert explanation_cost(frame.drop(columns="explained")).empty
