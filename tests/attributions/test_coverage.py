"""Rule-based methods refuse models their rules do not touch, before the model runs; known identities."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.attributions.identities import KNOWN_IDENTITIES, known_identity, positively_homogeneous
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import ConvDigitNet, bcos_digit_cnn
from tests.models.test_native import randomise_norm_stats

GEN = torch.Generator().manual_seed(0)
IMAGES = torch.rand(3, 1, 28, 28, generator=GEN)
TARGETS = torch.tensor([1, 4, 7])


class Tripwire(nn.Module):
    """Fails the test if the model is ever run (refusals come before any compute)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the model ran before the method was refused")


class FunctionalReLU(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x)


class SubReLU(nn.ReLU):
    """A subclass: Captum's guided backprop hooks it (isinstance), its DeepLift does not (exact type)."""


class TinyAttention(nn.Module):
    """Self-attention over the 28 rows with a softmax module, as in the bcos package's ViTs."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(28, 3 * 28, bias=False)
        self.attend = nn.Softmax(dim=-1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x[:, 0]).chunk(3, dim=-1)
        out = self.attend(q @ k.transpose(1, 2) / math.sqrt(28)) @ v
        return self.head(self.relu(out).mean(1))


def adapter(module: nn.Module, name: str = "hand") -> ModelAdapter:
    return ModelAdapter(name, "standard", module.eval(), normalized((0.5,), (0.25,)), 10, (28, 28))


def cnn(act: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), act, nn.Flatten(), nn.Linear(4 * 28 * 28, 10))


REFUSED = {
    "no ReLU (GELU)": cnn(nn.GELU()),
    "only a functional nonlinearity": cnn(FunctionalReLU()),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize(
    ("name", "looks_for", "would_be"),
    [
        ("guided_backprop", "nn.ReLU; the model has none", "the plain gradient \\(method 'gradient'\\)"),
        ("deeplift", "exactly these types: nn.ELU, .*nn.ReLU.*; the model has none", "method 'input_x_gradient'"),
    ],
)
def test_refused_before_any_forward_with_what_is_looked_for_and_found(case, name, looks_for, would_be):
    module = nn.Sequential(Tripwire(), *REFUSED[case])
    model = adapter(module)
    has = "GELU" if "GELU" in case else "FunctionalReLU"
    pattern = f"method '{name}' cannot explain model 'hand': .*{looks_for} \\(its layers: .*{has}.*{would_be}"
    with pytest.raises(UnsupportedMethodError, match=pattern):
        get_method(name).attribute(model, model.encode(IMAGES), TARGETS)


def test_a_relu_cnn_is_accepted_and_the_rules_change_the_maps():
    model = adapter(ConvDigitNet())
    x = model.encode(IMAGES)
    for name, plain in (("guided_backprop", "gradient"), ("deeplift", "input_x_gradient")):
        get_method(name).check(model)
        maps, base = get_method(name).attribute(model, x, TARGETS), get_method(plain).attribute(model, x, TARGETS)
        assert (maps - base).abs().max() > 0.1 * base.abs().max(), name


def test_mixed_models_run_the_documented_hybrid():
    # nn.ReLU beside a functional one: guided backprop guides only the module, DeepLift rescales only there.
    torch.manual_seed(0)
    mixed = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), FunctionalReLU(), nn.Flatten()
    )
    model = adapter(nn.Sequential(*mixed, nn.Linear(4 * 28 * 28, 10)))
    x = model.encode(IMAGES)
    gbp = get_method("guided_backprop").attribute(model, x, TARGETS)
    assert not torch.allclose(gbp, get_method("gradient").attribute(model, x, TARGETS))


def test_guided_backprop_counts_relu_subclasses_and_deeplift_only_exact_types_as_captum_does():
    model = adapter(cnn(SubReLU()))
    get_method("guided_backprop").check(model)
    with pytest.raises(UnsupportedMethodError, match="exactly these types"):
        get_method("deeplift").check(model)


def test_deeplift_refuses_an_internal_softmax_whose_rule_mixes_the_batch():
    model = adapter(TinyAttention())
    x = model.encode(IMAGES)
    with pytest.raises(UnsupportedMethodError, match=r"nn.Softmax modules \(attend\).*rest of the batch"):
        get_method("deeplift").check(model)
    # Why: Captum's rule centres the multipliers over the whole tensor, so an image's map depends on its
    # batch companions (the unchecked computation, called directly).
    method = get_method("deeplift")
    batch = method._attribute(model, x, TARGETS)[:1]
    alone = method._attribute(model, x[:1], TARGETS[:1])
    assert (batch - alone).abs().max() > 1e-3 * alone.abs().max()


class ReusedReLU(nn.Module):
    """One nn.ReLU called twice per forward, as in a torchvision ResNet block."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.relu, self.head = nn.ReLU(), nn.Linear(4 * 28 * 28, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv2(self.relu(self.conv1(x)))).flatten(1))


def test_deeplift_refuses_a_relu_called_twice_which_captum_cannot_explain():
    torch.manual_seed(0)
    model = adapter(ReusedReLU())
    with pytest.raises(UnsupportedMethodError, match=r"its modules relu are each called more than once per forward"):
        get_method("deeplift").check(model)
    with pytest.raises(RuntimeError, match="used more than once"):  # why: Captum's own failure, unchecked
        get_method("deeplift")._attribute(model, model.encode(IMAGES), TARGETS)
    get_method("guided_backprop").check(model)  # its hooks only rewrite the gradient: a reused ReLU is fine
    get_method("deeplift").check(adapter(cnn(nn.ReLU())))  # each ReLU once: accepted


# ----------------------------------------------------------------------------- known identities


def bcos_model() -> ModelAdapter:
    torch.manual_seed(0)
    net = randomise_norm_stats(bcos_digit_cnn(), var=(1e-3, 2e-3))
    return ModelAdapter(
        "bcos", "bcos", net.eval(), bcos_inverse(1), 10, (28, 28), activation="sigmoid", logit_bias=-math.log(9)
    )


def test_a_bias_free_bcos_cnn_is_positively_homogeneous_and_ig_equals_input_x_gradient():
    model = bcos_model()
    assert positively_homogeneous(model.module)
    assert not positively_homogeneous(ConvDigitNet())  # custom forward code and biases: not recognised
    x = model.encode(IMAGES)
    with torch.no_grad():
        f1, f3 = model.module(x) - model.logit_bias, model.module(3 * x) - model.logit_bias
    torch.testing.assert_close(f3, 3 * f1, rtol=1e-4, atol=1e-5)
    ig = get_method("integrated_gradients", n_steps=8).attribute(model, x, TARGETS)
    ixg = get_method("input_x_gradient").attribute(model, x, TARGETS)
    assert (ig - ixg).abs().max() <= 1e-4 * ixg.abs().max()


def test_known_identities_name_their_reason_only_where_the_premise_holds():
    ig = {"integrated_gradients": {"baseline": 0.0, "n_steps": 8}, "input_x_gradient": {}}
    assert "positively homogeneous" in known_identity(bcos_model(), ig)
    assert known_identity(adapter(ConvDigitNet()), ig) is None
    assert known_identity(bcos_model(), {**ig, "integrated_gradients": {"baseline": 0.5}}) is None
    assert known_identity(bcos_model(), {"gradient": {}, "input_x_gradient": {}}) is None
    assert all(len(identity.pair) == 2 and identity.reason for identity in KNOWN_IDENTITIES)


def bcos_b_model(b: float) -> ModelAdapter:
    torch.manual_seed(0)
    net = randomise_norm_stats(bcos_digit_cnn(b=b, max_out=2), var=(1e-3, 2e-3))
    return ModelAdapter("bcos_b", "bcos", net.eval(), bcos_inverse(1), 10, (28, 28))


def test_native_equals_ig_and_input_x_gradient_on_a_bias_free_b1_bcos_net_only():
    ig = {"native": {}, "integrated_gradients": {"baseline": 0.0, "n_steps": 8}}
    ixg = {"native": {}, "input_x_gradient": {}}
    linear, dynamic = bcos_b_model(1.0), bcos_b_model(2.0)
    x = linear.encode(IMAGES)
    native = get_method("native").attribute(linear, x, TARGETS)
    for method in ("integrated_gradients", "input_x_gradient"):
        other = get_method(method, **({"n_steps": 8} if method == "integrated_gradients" else {}))
        other_map = other.attribute(linear, x, TARGETS)
        assert (native - other_map).abs().max() <= 1e-5 * native.abs().max()
    assert "B = 1" in known_identity(linear, ig) and "B = 1" in known_identity(linear, ixg)
    assert known_identity(dynamic, ig) is None and known_identity(dynamic, ixg) is None
    assert known_identity(linear, {**ig, "integrated_gradients": {"baseline": 0.5}}) is None
    # The premise is real: at B = 2 the dynamic scale makes native differ from IG.
    x2 = dynamic.encode(IMAGES)
    native2 = get_method("native").attribute(dynamic, x2, TARGETS)
    ig2 = get_method("integrated_gradients", n_steps=8).attribute(dynamic, x2, TARGETS)
    assert (native2 - ig2).abs().max() > 1e-3 * native2.abs().max()
