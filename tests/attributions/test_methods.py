"""Attribution adapters: contracts, axioms, batching, seeding, and errors before compute."""

import math

import pytest
import torch

from faithbench.attributions import ALL_CONTROLS, METHODS, UnsupportedMethodError, get_method
from faithbench.attributions.base import DEFAULT_MAX_BATCH, AttributionMethod
from faithbench.attributions.perturbation import segment
from faithbench.models.adapter import ModelAdapter
from faithbench.models.bcosify import bcosify, remove_biases
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import ConvDigitNet, bcos_digit_cnn, digit_vit
from tests.models.test_native import randomise_norm_stats

GEN = torch.Generator().manual_seed(0)
FAST = {
    "lime": {"n_samples": 40, "segmentation": "slic"},
    "shapley_sampling": {"n_samples": 2},
    "integrated_gradients": {"n_steps": 8},
}


def make_models() -> dict[str, ModelAdapter]:
    torch.manual_seed(0)
    std, b2 = normalized(MNIST_MEAN, MNIST_STD), bcos_inverse(1)
    vit = digit_vit(depth=2, dim=32).eval()
    return {
        "cnn": ModelAdapter("cnn", "standard", ConvDigitNet(), std, 10, (28, 28), conv_layer="features"),
        "bcos_cnn": ModelAdapter(
            "bcos_cnn",
            "bcos",
            randomise_norm_stats(bcos_digit_cnn(), var=(1e-3, 2e-3)),
            b2,
            10,
            (28, 28),
            activation="sigmoid",
            logit_bias=-math.log(9),
            conv_layer="9",
        ),
        "vit": ModelAdapter("vit", "standard", vit, std, 10, (28, 28), is_vit=True),
        "aloe_vit": ModelAdapter(
            "aloe_vit",
            "aloe",
            bcosify(
                vit,
                image_channels=1,
                mean=MNIST_MEAN,
                std=MNIST_STD,
                first_layer="to_patch_embedding.linear",
                num_classes=10,
                classifier_before_pooling=False,  # ALOE's order: the probe reads the mean token
            ),
            b2,
            10,
            (28, 28),
            is_vit=True,
            activation="sigmoid",
            logit_bias=-math.log(9),
        ),
    }


MODELS = make_models()
IMAGES = torch.rand(3, 1, 28, 28, generator=GEN)
TARGETS = torch.tensor([1, 4, 7])
SUPPORT = {  # expected support, by method: models it must explain (the others must be refused)
    "native": {"bcos_cnn", "aloe_vit"},
    "native_normalised": {"aloe_vit"},  # the only one with an input-normalisation layer 0
    "gradcam": {"cnn", "bcos_cnn"},
    "lrp": {"cnn", "bcos_cnn"},
    "attention_rollout": {"vit", "aloe_vit"},
    "attention_last": {"vit", "aloe_vit"},
    "chefer_cam": {"vit", "aloe_vit"},
    "attnlrp": {"vit", "aloe_vit"},
    "guided_backprop": {"cnn"},  # the only model with nn.ReLU modules
    "deeplift": {"cnn"},  # no covered module in the B-cos CNN; nn.Softmax modules in the ViTs
}


def method(name: str):
    return get_method(name, **FAST.get(name, {}))


# The controls ask no model (tests/attributions/test_controls.py); the truth controls explain only hand-set models
# (tests/bench/test_card.py).
EXPLAINERS = [m for m in METHODS if m not in ALL_CONTROLS]


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("name", EXPLAINERS)
def test_contract_shape_device_dtype_or_refusal_before_compute(name, model_name):
    model = MODELS[model_name]
    x = model.encode(IMAGES)
    expected = SUPPORT.get(name, set(MODELS))
    if model_name not in expected:
        calls = []
        hook = model.module.register_forward_pre_hook(lambda *a: calls.append(1))
        try:
            with pytest.raises(UnsupportedMethodError, match=f"method '{name}' cannot explain model '{model_name}'"):
                method(name).attribute(model, x, TARGETS)
        finally:
            hook.remove()
        assert not calls, "the model ran before the method was refused"
        return
    maps = method(name).attribute(model, x, TARGETS)
    assert maps.shape == (3, 28, 28) and maps.dtype == x.dtype and maps.device == x.device
    assert torch.isfinite(maps).all()


@pytest.mark.parametrize("name", EXPLAINERS)
def test_no_model_call_exceeds_max_batch_and_the_maps_do_not_change(name):
    model = MODELS[sorted(SUPPORT.get(name, {"cnn"}))[0]]
    x = model.encode(torch.rand(7, 1, 28, 28, generator=torch.Generator().manual_seed(1)))
    targets = torch.arange(7) % 10
    sizes: list[int] = []  # batch sizes seen by every module (some methods run part of the model)

    def record(module, args):
        sizes.extend(a.shape[0] for a in args[:1] if isinstance(a, torch.Tensor) and a.dim())

    hooks = [m.register_forward_pre_hook(record) for m in model.module.modules()]
    try:
        bounded = method(name).attribute(model, x, targets, max_batch=3)
    finally:
        for hook in hooks:
            hook.remove()
    assert sizes and max(sizes) <= 3, sizes
    free = method(name).attribute(model, x, targets)
    torch.testing.assert_close(bounded, free, rtol=1e-4, atol=1e-6)


def test_a_call_bounds_its_own_model_calls_and_leaves_the_method_unchanged():
    seen = []

    class Probe(AttributionMethod):
        name, description, defaults = "probe", "records the bound it runs under", {}

        def _attribute(self, model, inputs, targets):
            seen.append(self.max_batch)
            return inputs.abs()

    probe, model = Probe(), MODELS["cnn"]
    x = model.encode(torch.rand(5, 1, 28, 28))
    probe.attribute(model, x, torch.arange(5), max_batch=2)
    assert seen == [2, 2, 2] and probe.max_batch == DEFAULT_MAX_BATCH  # three chunks of 2, nothing left on the object
    before = dict(vars(probe))
    probe.attribute(model, x, torch.arange(5), max_batch=4)
    assert vars(probe) == before and seen[-2:] == [4, 4]


@pytest.mark.parametrize("name", EXPLAINERS)
def test_a_batch_gives_the_same_maps_as_one_input_at_a_time(name):
    model = MODELS[sorted(SUPPORT.get(name, {"cnn"}))[0]]
    x = model.encode(IMAGES)
    m = method(name)
    batch = m.attribute(model, x, TARGETS)
    for i in range(3):
        one = m.attribute(model, x[i : i + 1], TARGETS[i : i + 1])
        torch.testing.assert_close(batch[i : i + 1], one, rtol=1e-4, atol=1e-6)


def test_integrated_gradients_completeness():
    model = MODELS["cnn"]
    x = model.encode(IMAGES)
    ig = get_method("integrated_gradients", n_steps=300).attribute(model, x, TARGETS)
    with torch.no_grad():
        f = model(x).gather(1, TARGETS.view(-1, 1)).squeeze(1)
        f0 = model(torch.zeros_like(x)).gather(1, TARGETS.view(-1, 1)).squeeze(1)
    torch.testing.assert_close(ig.sum(dim=(1, 2)), f - f0, rtol=1e-2, atol=1e-3)


def test_input_x_gradient_equals_native_for_a_bias_free_piecewise_linear_model():
    torch.manual_seed(0)
    net = ConvDigitNet()
    remove_biases(net)
    # No dynamic factor besides ReLU gates and max-pool selections: W(x)x is plain input x gradient.
    model = ModelAdapter("relu_net", "bcosified", net, normalized(MNIST_MEAN, MNIST_STD), 10, (28, 28))
    x = model.encode(IMAGES)
    ixg = get_method("input_x_gradient").attribute(model, x, TARGETS)
    native = get_method("native").attribute(model, x, TARGETS)
    torch.testing.assert_close(ixg, native)
    with torch.no_grad():
        logits = model(x).gather(1, TARGETS.view(-1, 1)).squeeze(1)
    torch.testing.assert_close(native.sum(dim=(1, 2)), logits, rtol=1e-4, atol=1e-5)


def test_gradcam_is_non_negative_after_relu_and_signed_without():
    model = MODELS["cnn"]
    x = model.encode(IMAGES)
    assert (get_method("gradcam").attribute(model, x, TARGETS) >= 0).all()
    raw = get_method("gradcam", relu=False).attribute(model, x, TARGETS)
    assert (raw < 0).any()


def test_attention_rollout_is_identical_for_every_target():
    model = MODELS["vit"]
    x = model.encode(IMAGES[:1]).expand(10, -1, -1, -1)
    maps = get_method("attention_rollout").attribute(model, x, torch.arange(10))
    assert torch.equal(maps, maps[:1].expand_as(maps))
    assert not METHODS.get("attention_rollout").capabilities.class_specific


@pytest.mark.parametrize("name", ["lime", "shapley_sampling"])
def test_seeded_methods_are_reproducible(name):
    model = MODELS["cnn"]
    x = model.encode(IMAGES[:2])
    a = get_method(name, seed=3, **FAST[name]).attribute(model, x, TARGETS[:2])
    b = get_method(name, seed=3, **FAST[name]).attribute(model, x, TARGETS[:2])
    c = get_method(name, seed=4, **FAST[name]).attribute(model, x, TARGETS[:2])
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert METHODS.get(name).capabilities.seeded


def test_lime_top_k_mask_is_binary_with_at_most_k_segments():
    model = MODELS["cnn"]
    x = model.encode(IMAGES[:1])
    mask = get_method("lime", output="top_k_mask", top_k=5, **FAST["lime"]).attribute(model, x, TARGETS[:1])
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    segs = segment(IMAGES[:1], "slic")
    assert len(segs[mask > 0].unique()) <= 5


def test_patch_segmentation_by_hand():
    seg = segment(torch.zeros(1, 1, 4, 6), "patches", grid=2)
    assert seg[0].tolist() == [[0, 0, 0, 1, 1, 1]] * 2 + [[2, 2, 2, 3, 3, 3]] * 2
    with pytest.raises(ValueError, match="unknown segmentation 'watershed'"):
        segment(torch.zeros(1, 1, 4, 4), "watershed")


def test_unknown_methods_and_parameters_list_the_valid_ones():
    with pytest.raises(KeyError, match="unknown method 'smoothgrad'; valid methods: .*integrated_gradients"):
        get_method("smoothgrad")
    with pytest.raises(TypeError, match="has no parameter\\(s\\) steps; valid: baseline, internal_batch_size"):
        get_method("integrated_gradients", steps=10)


def test_lrp_refuses_vits_with_the_reason():
    with pytest.raises(UnsupportedMethodError, match="use .attnlrp. for ViTs"):
        get_method("lrp").check(MODELS["vit"])


def test_bad_inputs_are_rejected():
    model = MODELS["cnn"]
    with pytest.raises(ValueError, match="targets must have shape \\(3,\\)"):
        get_method("gradient").attribute(model, model.encode(IMAGES), TARGETS[:2])
    with pytest.raises(ValueError, match="inputs must be \\(B, C, H, W\\)"):
        get_method("gradient").attribute(model, torch.zeros(3, 28, 28), TARGETS)


def test_lrp_on_a_batchnorm_resnet_runs_with_the_resnet_canonizer():
    import torchvision

    torch.manual_seed(0)
    net = randomise_norm_stats(torchvision.models.resnet18(num_classes=5))
    model = ModelAdapter("r18", "standard", net, normalized((0.5,) * 3, (0.25,) * 3), 5, (64, 64), conv_layer="layer4")
    x = model.encode(torch.rand(2, 3, 64, 64, generator=GEN))
    maps = get_method("lrp").attribute(model, x, torch.tensor([0, 3]))
    assert maps.shape == (2, 64, 64) and torch.isfinite(maps).all()


def test_every_registered_method_declares_its_defaults_and_description():
    for name in METHODS:
        cls = METHODS.get(name)
        assert cls.name == name and cls.description
        assert get_method(name).params == cls.defaults


def test_native_requires_an_interpretable_model():
    with pytest.raises(UnsupportedMethodError, match="needs a B-cos, B-cosified or ALOE model; this one is standard"):
        get_method("native").check(MODELS["cnn"])


def test_lrp_zero_reproduces_native_and_input_x_gradient():
    lrp0 = get_method("lrp", composite="epsilon", epsilon=1e-9)
    bcos = MODELS["bcos_cnn"]
    x = bcos.encode(IMAGES)
    torch.testing.assert_close(
        lrp0.attribute(bcos, x, TARGETS),
        get_method("native").attribute(bcos, x, TARGETS),
        rtol=1e-4,
        atol=1e-7,
    )
    torch.manual_seed(0)
    net = ConvDigitNet()
    remove_biases(net)
    relu = ModelAdapter("relu_net", "standard", net, normalized(MNIST_MEAN, MNIST_STD), 10, (28, 28))
    for side in (28, 56):  # 56 px: the head's output map is averaged, which LRP must see as a layer
        x = relu.encode(torch.rand(3, 1, side, side, generator=GEN))
        torch.testing.assert_close(
            lrp0.attribute(relu, x, TARGETS),
            get_method("input_x_gradient").attribute(relu, x, TARGETS),
            rtol=1e-4,
            atol=1e-7,
        )


def test_lrp_on_a_bcosified_model_is_complete_wrt_the_normalised_input():
    from bcos.common import explanation_mode

    torch.manual_seed(0)
    net = bcosify(
        randomise_norm_stats(ConvDigitNet()), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10
    )
    model = ModelAdapter(
        "bcosified",
        "bcosified",
        net,
        bcos_inverse(1),
        10,
        (28, 28),
        activation="sigmoid",
        logit_bias=-math.log(9),
    )
    x = model.encode(IMAGES)
    lrp0 = get_method("lrp", composite="epsilon", epsilon=1e-9).attribute(model, x, TARGETS)
    xg = x.clone().requires_grad_(True)
    with explanation_mode(net):
        (g,) = torch.autograd.grad(net(xg).gather(1, TARGETS.view(-1, 1)).sum(), xg)
    # Relevance passes layer 0 unchanged: it is (x - mean) * grad, which sums to logit - bias.
    torch.testing.assert_close(lrp0, ((x - net[0].mean) * g).sum(1), rtol=1e-4, atol=1e-7)
