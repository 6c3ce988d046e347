"""Corruption controls: a real method's map shuffled, of another class, or on a randomised copy of the model."""

import copy
import dataclasses

import pytest
import torch

from faithbench.attributions import ALL_CONTROLS, CORRUPTION_CONTROLS, RUN_CONTROLS, UnsupportedMethodError, get_method
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UnknownNameError, UserError
from faithbench.models.randomise import parameter_layers
from tests.attributions.test_methods import MODELS
from tests.text_helpers import random_rows, small_text_model


def _batch(model_name: str = "cnn", n: int = 4):
    model = MODELS[model_name]
    x = model.encode(torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(3)))
    return model, x, torch.arange(n) % model.num_classes


def test_corruptions_are_controls_that_a_suite_runs():
    assert set(CORRUPTION_CONTROLS) <= set(RUN_CONTROLS) and set(CORRUPTION_CONTROLS) <= set(ALL_CONTROLS)


@pytest.mark.parametrize("model_name", ["cnn", "vit"])
def test_shuffled_permutes_the_base_maps_values_with_one_seeded_permutation(model_name):
    model, x, t = _batch(model_name)
    base = get_method("input_x_gradient").attribute(model, x, t)
    shuffled = get_method("shuffled").attribute(model, x, t)
    assert shuffled.shape == base.shape and not torch.equal(shuffled, base)
    torch.testing.assert_close(shuffled.flatten(1).sort(dim=1).values, base.flatten(1).sort(dim=1).values)
    again = get_method("shuffled").attribute(model, x[1:3], t[1:3])  # batch-invariant: one permutation for all
    torch.testing.assert_close(again, shuffled[1:3])
    other = get_method("shuffled", seed=1).attribute(model, x, t)
    assert not torch.equal(other, shuffled)
    # the permutation is the same for every sample: where sample 0's largest value went, sample 1's went too
    perm_of = lambda b, s: (s.flatten(1)[:, None, :] == b.flatten(1)[:, :, None]).float().argmax(2)  # noqa: E731
    p = perm_of(base, shuffled)
    assert torch.equal(p[0], p[1])


def test_shuffled_text_permutes_each_sentences_tokens_and_keeps_padding():
    model = small_text_model()
    ids = random_rows(6)
    x, t = model.encode(ids), torch.zeros(6, dtype=torch.long)
    base = get_method("gradient").attribute(model, x, t)
    shuffled = get_method("shuffled", of="gradient").attribute(model, x, t)
    pads = ids == 0
    assert pads.any() and torch.equal(shuffled[pads], base[pads])
    for row in range(6):
        keep = ~pads[row]
        a, b = base[row][keep], shuffled[row][keep]
        torch.testing.assert_close(a.sort().values, b.sort().values)
        assert not torch.equal(a, b)


def test_other_class_is_the_base_map_of_the_next_class():
    model, x, t = _batch()
    expected = get_method("input_x_gradient").attribute(model, x, (t + 1) % model.num_classes)
    torch.testing.assert_close(get_method("other_class").attribute(model, x, t), expected)
    grads = get_method("other_class", of="gradient").attribute(model, x, t)
    torch.testing.assert_close(grads, get_method("gradient").attribute(model, x, (t + 1) % model.num_classes))


@pytest.mark.parametrize("model_name", ["cnn", "vit"])
def test_randomised_model_explains_a_redrawn_copy_and_leaves_the_model_alone(model_name):
    model, x, t = _batch(model_name)
    before = {k: v.clone() for k, v in model.module.state_dict().items()}
    method = get_method("randomised_model")
    maps = method.attribute(model, x, t)
    copy = method.randomised(model)
    assert copy.module is not model.module and method.randomised(model) is copy  # built once
    for k, v in model.module.state_dict().items():
        assert torch.equal(v, before[k])
    changed = [n for n, layer in parameter_layers(copy.module) if any(p.numel() > 1 for p in layer.parameters(False))]
    assert changed
    torch.testing.assert_close(maps, get_method("input_x_gradient").attribute(copy, x, t))
    assert not torch.allclose(maps, get_method("input_x_gradient").attribute(model, x, t))
    seeded = get_method("randomised_model").attribute(model, x, t)
    torch.testing.assert_close(seeded, maps)  # the same seed, the same copy


def test_corruptions_check_like_their_base_and_refuse_bad_parameters():
    model, x, t = _batch()
    with pytest.raises(UnsupportedMethodError, match="B-cos, B-cosified or ALOE"):
        get_method("shuffled", of="native").attribute(model, x, t)  # a standard CNN has no W(x)x
    with pytest.raises(UnknownNameError, match="unknown method"):
        get_method("shuffled", of="no_such_method")
    with pytest.raises(ValueError, match="corruption"):
        get_method("other_class", of="shuffled")
    native = dataclasses.replace(model, family="bcos", native_explainer=lambda inputs, targets: inputs.sum(1))
    with pytest.raises(UnsupportedMethodError, match="bound to its original weights"):
        get_method("randomised_model", of="native").check(native)


def test_corruptions_cost_what_their_base_costs():
    model = MODELS["cnn"]
    for name in CORRUPTION_CONTROLS:
        method, base = get_method(name, of="integrated_gradients"), get_method("integrated_gradients")
        assert method.model_inputs_per_explanation(model) == base.model_inputs_per_explanation(model)


def test_randomised_model_rebuilds_its_copy_when_the_model_changes_in_place():
    """The randomisation metric re-draws a copy's layers in place between cascade depths (review of 2026-11-26)."""
    model, x, t = _batch()
    model = dataclasses.replace(model, module=copy.deepcopy(model.module))
    method = get_method("randomised_model")
    first = method.attribute(model, x, t)
    with torch.no_grad():
        for p in model.module.parameters():
            p.mul_(1.5)
    assert not torch.allclose(method.attribute(model, x, t), first)
    torch.testing.assert_close(method.attribute(model, x, t), get_method("randomised_model").attribute(model, x, t))


def test_a_shuffled_coarse_map_is_not_coarse_and_a_corruption_runs_its_base_at_the_suites_parameters():
    assert get_method("other_class", of="gradcam").capabilities.coarse
    assert not get_method("shuffled", of="gradcam").capabilities.coarse
    suite = {"name": "s", "dataset": "mnist", "models": ["cnn_mnist"], "methods": ["integrated_gradients"]}
    suite |= {"metrics": ["gridpg"], "method_params": {"integrated_gradients": {"n_steps": 4}}, "controls": True}
    plain = build_suite(suite, "suite")  # the default base, input_x_gradient, is at its defaults: nothing recorded
    assert "of_params" not in plain.method_params.get("shuffled", {})
    ig = suite | {"method_params": {**suite["method_params"], "shuffled": {"of": "integrated_gradients"}}}
    built = build_suite(ig, "suite")
    assert built.method_params["shuffled"] == {"of": "integrated_gradients", "of_params": {"n_steps": 4}}
    assert "of_params" not in ig["method_params"]["shuffled"]  # the caller's tables are left as they were
    method = get_method("shuffled", **built.method_params["shuffled"])
    assert (
        method.base.params["n_steps"] == 4
        and get_method("shuffled", of="integrated_gradients").base.params["n_steps"]
        == get_method("integrated_gradients").params["n_steps"]
    )
    assert build_suite(built.to_dict(), "run.json").method_params == built.method_params  # a run read back
    other = {"of": "integrated_gradients", "of_params": {"n_steps": 8}}
    bad = suite | {"method_params": {**suite["method_params"], "shuffled": other}}
    with pytest.raises(UserError, match=r"'shuffled' corrupts 'integrated_gradients' with of_params .*n_steps.*4"):
        build_suite(bad, "suite")
    with pytest.raises(UserError, match=r"shuffled.*n_step"):  # the base's parameters are checked by the base
        build_suite(suite | {"method_params": {"shuffled": {"of_params": {"n_step": 4}}}}, "suite")
