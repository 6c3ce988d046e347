"""The cost columns: outermost model calls and the inputs they carried."""

import pytest
import torch

from attributions import get_method
from bench.cost import measuring
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
