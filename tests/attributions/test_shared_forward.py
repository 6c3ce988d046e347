"""One forward pass for the targets of equal inputs (GridPG's cells): the same maps as row by row, fewer model calls."""

import pytest
import torch

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.attributions.shared_forward import first_equal, has_repeats, occurrences
from faithbench.bench.run.counters import measuring
from tests.attributions.test_methods import FAST, MODELS

SHARING = ["gradient", "input_x_gradient", "integrated_gradients", "gradcam", "lrp", "native", "native_normalised"]
GEN = torch.Generator().manual_seed(3)


def test_occurrences_number_equal_rows_in_order():
    a, b, c = torch.rand(3, 1, 4, 4, generator=GEN)
    rows = torch.stack([a, b, a, c, b, a])
    distinct, inverse, occurrence = occurrences(rows)
    assert distinct.tolist() == [0, 1, 3]
    assert inverse.tolist() == [0, 1, 0, 2, 1, 0]
    assert occurrence.tolist() == [0, 0, 1, 0, 1, 2]
    assert first_equal(rows).tolist() == [0, 1, 0, 3, 1, 0]
    assert has_repeats(rows) and not has_repeats(torch.stack([a, b, c])) and not has_repeats(rows[:1])


def test_rows_that_differ_in_one_bit_are_not_equal():
    a = torch.rand(1, 1, 4, 4, generator=GEN)
    b = a.clone()
    b[0, 0, 3, 3] = torch.nextafter(b[0, 0, 3, 3], torch.tensor(2.0))
    assert not has_repeats(torch.cat([a, b]))
    assert occurrences(torch.cat([a, b, a]))[1].tolist() == [0, 1, 0]


def grid_rows(n_inputs: int, n_targets: int, shuffle: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """GridPG's rows: each input once per target (targets of one input consecutive), plus one unrepeated input. Its
    own generator: the same rows whatever ran before (xdist's order would change them, and the float gap with them)."""
    gen = torch.Generator().manual_seed(5)
    images = torch.rand(n_inputs + 1, 1, 28, 28, generator=gen)
    index = torch.cat([torch.arange(n_inputs).repeat_interleave(n_targets), torch.tensor([n_inputs])])
    targets = torch.cat([torch.arange(n_targets).repeat(n_inputs) * 2 + 1, torch.tensor([5])])
    if shuffle:
        order = torch.randperm(len(index), generator=gen)
        index, targets = index[order], targets[order]
    return images[index], targets


@pytest.mark.parametrize("shuffle", [False, True], ids=["grid-order", "shuffled"])
@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("name", SHARING)
def test_shared_forward_gives_the_row_by_row_maps_with_fewer_model_calls(name, model_name, shuffle):
    model, method = MODELS[model_name], get_method(name, **FAST.get(name, {}))
    try:
        method.check(model)
    except UnsupportedMethodError:
        pytest.skip(f"{name} does not explain {model_name}")
    assert method.shares_forward(model) == (model.native_explainer is None)
    images, targets = grid_rows(3, 4, shuffle)
    inputs = model.encode(images)
    with measuring(model.module, inputs.device) as shared_cost:
        shared = method.attribute(model, inputs, targets)
    with measuring(model.module, inputs.device) as row_cost:
        by_row = torch.cat([method.attribute(model, inputs[i : i + 1], targets[i : i + 1]) for i in range(len(inputs))])
    gap = float((shared - by_row).abs().amax())
    assert gap <= 1e-5 * float(by_row.abs().amax()) + 1e-8, f"{name} on {model_name}: shared maps differ by {gap}"
    if name == "gradient" and model.family == "aloe":  # B-cosified: its channel sum cancels to 0 (test_cancellation)
        assert not shared.any() and not by_row.any()
    else:
        assert not torch.equal(shared[0], shared[1]), "the targets of one input got the same map"
    # 3 inputs x 4 targets and an unrepeated input: 4 distinct inputs instead of 13 rows (per IG step; per
    # layer-0 split for native_normalised, whose two parts each count as calls)
    steps = FAST["integrated_gradients"]["n_steps"] if name == "integrated_gradients" else 1
    assert row_cost.model_inputs % (13 * steps) == 0
    assert shared_cost.model_inputs == row_cost.model_inputs // 13 * 4


def test_methods_that_do_not_share_keep_one_pass_per_row():
    model, method = MODELS["cnn"], get_method("guided_backprop")
    images, targets = grid_rows(2, 3, shuffle=False)
    with measuring(model.module, images.device) as cost:
        method.attribute(model, model.encode(images), targets)
    assert not method.shares_forward(model) and cost.model_inputs == 7
