"""Native W(x)x explanations: completeness, explanation mode, batching; B-cosification equivalence."""

import math

import pytest
import torch
import torchvision
from bcos.common import explanation_mode
from torch import nn

from faithbench.models.adapter import ModelAdapter, input_x_gradient
from faithbench.models.bcosify import DetachableGELU, bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import ConvDigitNet, bcos_digit_cnn, ccexam_mnist_cnn, digit_vit
from tests.helpers import bcosified_digit_vit

GEN = torch.Generator().manual_seed(0)


def images(n=4, side=28, channels=1):
    return torch.rand(n, channels, side, side, generator=GEN)


def randomise_norm_stats(model: nn.Module, var: tuple[float, float] = (0.5, 2.0)) -> nn.Module:
    """Random BatchNorm statistics so that eval-mode BN is a non-trivial affine map.

    Untrained B-cos layers shrink activations a lot; small variances (as in the seed-code check)
    keep the logits far from zero so that completeness is not trivially 0 == 0.
    """
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(*var)
            if m.weight is not None:
                m.weight.data.uniform_(0.5, 1.5)
            if m.bias is not None:
                m.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def grad_in_explanation_mode(module: nn.Module, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    with explanation_mode(module):
        out = module(x).gather(1, targets.view(-1, 1)).sum()
    (g,) = torch.autograd.grad(out, x)
    return g


# ----------------------------------------------------------------------------- completeness


def bcos_cnn() -> nn.Module:
    torch.manual_seed(0)
    return randomise_norm_stats(bcos_digit_cnn(), var=(1e-3, 2e-3))


def test_bcos_cnn_contributions_sum_to_the_logit_minus_its_bias():
    model = bcos_cnn()
    adapter = ModelAdapter("b", "bcos", model, bcos_inverse(1), 10, (28, 28), logit_bias=-math.log(9))
    x = adapter.encode(images())
    t = torch.tensor([0, 3, 5, 9])
    contributions = adapter.explain_native(x, t)
    with torch.no_grad():
        logits = model(x).gather(1, t.view(-1, 1)).squeeze(1)
    assert (logits - adapter.logit_bias).abs().min() > 1e-2, "degenerate test: logits are all ~ the bias"
    torch.testing.assert_close(contributions.sum(dim=(1, 2, 3)), logits - adapter.logit_bias, rtol=1e-4, atol=1e-5)
    # Plain input x gradient (dynamic factors not detached) gives different maps: explanation mode matters.
    plain = input_x_gradient(model, x, t, explanation=False)
    assert not torch.allclose(plain, contributions, rtol=1e-2, atol=1e-4)


def test_bcosified_cnn_is_complete_once_the_input_normalisation_offset_is_accounted_for():
    torch.manual_seed(0)
    model = bcosify(
        randomise_norm_stats(ConvDigitNet()), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10
    )
    x = bcos_inverse(1)(images())
    t = torch.tensor([1, 2, 3, 4])
    with torch.no_grad():
        target_logit = model(x).gather(1, t.view(-1, 1)).squeeze(1) + math.log(9)
    g = grad_in_explanation_mode(model, x, t)
    # Layer 0 subtracts a constant mean: W(x)x is complete w.r.t. the normalised input, i.e. (x - mu) * grad.
    mu = model[0].mean
    torch.testing.assert_close(((x - mu) * g).sum(dim=(1, 2, 3)), target_logit, rtol=1e-4, atol=1e-5)


class _LeafPositionalEmbedding(nn.Module):
    """Replaces SimpleViT's sin-cos embedding by a stored tensor whose gradient we can read."""

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.original, self.value = original, None

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        self.value = self.original(patches).detach().requires_grad_(True)
        return self.value


def test_bcosified_vit_is_complete_counting_the_positional_embedding():
    model = bcosified_digit_vit(depth=2, dim=32)
    model.eval()
    pe = _LeafPositionalEmbedding(model[1].vit.positional_embedding)  # every token classified, then the mean
    model[1].vit.positional_embedding = pe
    x = bcos_inverse(1)(images(2)).requires_grad_(True)
    t = torch.tensor([3, 7])
    with explanation_mode(model):
        logits = model(x)
        selected = logits.gather(1, t.view(-1, 1)).sum()
    gx, gpe = torch.autograd.grad(selected, [x, pe.value])
    # pe is shared by the batch: its contribution is per sample only when the batch has one sample.
    total = ((x - model[0].mean) * gx).sum(dim=(1, 2, 3)).sum() + (pe.value * gpe).sum()
    torch.testing.assert_close(
        total, (logits.gather(1, t.view(-1, 1)) + math.log(9)).sum().detach(), rtol=1e-4, atol=1e-5
    )
    # Without the positional term the sum falls short: W(x)x alone is not complete for ViTs.
    assert not torch.allclose(((x - model[0].mean) * gx).sum(), total, rtol=1e-3)


def test_explanation_mode_does_not_change_outputs():
    torch.manual_seed(0)
    for model, enc in (
        (bcos_cnn(), bcos_inverse(1)),
        (
            bcosify(
                digit_vit(depth=2, dim=32),
                image_channels=1,
                mean=MNIST_MEAN,
                std=MNIST_STD,
                first_layer="to_patch_embedding.linear",
            ),
            bcos_inverse(1),
        ),
    ):
        x = enc(images())
        with torch.no_grad():
            plain = model.eval()(x)
            with explanation_mode(model):
                explained = model(x)
        torch.testing.assert_close(plain, explained)


def test_batched_targets_equal_one_target_at_a_time_and_do_not_accumulate():
    model = bcos_cnn()
    adapter = ModelAdapter("b", "bcos", model, bcos_inverse(1), 10, (28, 28))
    x = adapter.encode(images(1)).expand(10, -1, -1, -1)
    all_targets = adapter.explain_native(x, torch.arange(10))
    for k in (0, 4, 9):
        one = adapter.explain_native(x[:1], torch.tensor([k]))
        torch.testing.assert_close(all_targets[k : k + 1], one, rtol=1e-5, atol=1e-7)
    again = adapter.explain_native(x[:1], torch.tensor([9]))
    torch.testing.assert_close(again, all_targets[9:10], rtol=1e-5, atol=1e-7)


def test_standard_models_have_no_native_explanation():
    adapter = ModelAdapter("cnn", "standard", ConvDigitNet(), normalized(MNIST_MEAN, MNIST_STD), 10, (28, 28))
    with pytest.raises(TypeError, match="has no native explanation"):
        adapter.explain_native(torch.zeros(1, 1, 28, 28), torch.tensor([0]))
    with pytest.raises(ValueError, match="unknown model family 'linear'"):
        ModelAdapter("x", "linear", ConvDigitNet(), normalized(MNIST_MEAN, MNIST_STD), 10, (28, 28))


def test_detachable_gelu_matches_gelu_and_detaches_its_gate():
    x = torch.linspace(-4, 4, 101, requires_grad=True)
    for approximate in ("none", "tanh"):
        g = DetachableGELU(approximate)
        torch.testing.assert_close(g(x), nn.functional.gelu(x, approximate=approximate))
        g.set_explanation_mode(True)
        (grad,) = torch.autograd.grad(g(x).sum(), x)
        torch.testing.assert_close(grad * x, g(x).detach())  # gate * x: x * dy/dx == y


# ----------------------------------------------------------------------------- B-cosification


def _stage_one(model, **kw):
    return bcosify(model, b=1, keep_bias=True, avgpool_for_maxpool=False, **kw)


def test_functionally_equivalent_rewrite_of_a_digit_cnn():
    torch.manual_seed(0)
    model = ConvDigitNet().eval()
    converted = _stage_one(model, image_channels=1, mean=MNIST_MEAN, std=MNIST_STD)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(converted(bcos_inverse(1)(x)), model(normalized(MNIST_MEAN, MNIST_STD)(x)))


def test_functionally_equivalent_rewrite_of_torchvision_resnet18_with_batchnorm():
    torch.manual_seed(0)
    model = randomise_norm_stats(torchvision.models.resnet18(num_classes=7))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    converted = _stage_one(model, image_channels=3, mean=mean, std=std)
    x = images(2, side=64, channels=3)
    with torch.no_grad():
        torch.testing.assert_close(converted(bcos_inverse(3)(x)), model(normalized(mean, std)(x)), rtol=1e-4, atol=1e-4)


def test_functionally_equivalent_rewrite_of_a_vit_patch_embedding():
    torch.manual_seed(0)
    model = digit_vit(depth=2, dim=32).eval()
    converted = _stage_one(  # the head's LayerNorm does not commute with the mean: keep SimpleViT's order
        model,
        image_channels=1,
        mean=MNIST_MEAN,
        std=MNIST_STD,
        first_layer="to_patch_embedding.linear",
        classifier_before_pooling=False,
    )
    x = images(3)
    with torch.no_grad():
        torch.testing.assert_close(
            converted(bcos_inverse(1)(x)), model(normalized(MNIST_MEAN, MNIST_STD)(x)), rtol=1e-4, atol=1e-5
        )


def test_stage_two_removes_every_bias_sets_b_and_swaps_pooling():
    torch.manual_seed(0)
    converted = bcosify(ConvDigitNet(), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10)
    assert all(getattr(m, "bias", None) is None or isinstance(m.bias, bool) for m in converted.modules())
    assert {m.b for m in converted.modules() if hasattr(m, "b")} == {2.0}
    assert not any(isinstance(m, nn.MaxPool2d) for m in converted.modules())
    assert converted[-1].logit_bias == pytest.approx(-math.log(9))
    assert converted[1].features[0].linear.weight.shape[1] == 2


def test_bcosify_errors_name_the_problem():
    with pytest.raises(ValueError, match="no Conv2d with 3 input channels"):
        bcosify(ConvDigitNet(), image_channels=3, mean=(0.5,) * 3, std=(0.5,) * 3)
    with pytest.raises(ValueError, match="is not a module"):
        bcosify(ConvDigitNet(), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, first_layer="stem")


def test_convolutional_head_is_exactly_ccexams_mnistnet():
    from importlib.resources import files

    from ccexam.models import MNISTNet

    original = MNISTNet(28)
    path = str(files("ccexam") / "weights" / "mnist.pth")
    original.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    x = normalized(MNIST_MEAN, MNIST_STD)(images(8))
    with torch.no_grad():
        torch.testing.assert_close(ccexam_mnist_cnn()(x), original.eval()(x), rtol=1e-5, atol=1e-5)
    # ... and it accepts whole GridPG grids.
    assert ccexam_mnist_cnn()(torch.zeros(1, 1, 84, 84)).shape == (1, 10)


def test_functionally_equivalent_rewrite_of_a_torchvision_vit():
    torch.manual_seed(0)
    vit = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=5
    ).eval()
    for p in vit.parameters():
        if p.dim() == 1:
            p.data.normal_(0, 0.1)  # non-zero biases, so that keeping them is tested
    vit.heads.head.weight.data.normal_(0, 0.2)  # torchvision initialises the head to zero
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    converted = _stage_one(vit, image_channels=3, mean=mean, std=std)
    x = images(2, side=32, channels=3)
    with torch.no_grad():
        torch.testing.assert_close(converted(bcos_inverse(3)(x)), vit(normalized(mean, std)(x)), rtol=1e-4, atol=1e-5)
    full = bcosify(vit, image_channels=3, mean=mean, std=std, num_classes=5)
    assert not any(isinstance(m, nn.MultiheadAttention) for m in full.modules())
    x6 = bcos_inverse(3)(x)
    with torch.no_grad():
        plain = full(x6)
        with explanation_mode(full):
            torch.testing.assert_close(full(x6), plain)
    # q and k are detached in explanation mode: the attention matrix acts as a fixed linear map.
    xg = x6.clone().requires_grad_(True)
    with explanation_mode(full):
        (g_expl,) = torch.autograd.grad(full(xg)[:, 0].sum(), xg)
    (g_plain,) = torch.autograd.grad(full(xg)[:, 0].sum(), xg)
    assert not torch.allclose(g_expl, g_plain)
