"""A map whose channel sum cancels to rounding is exactly 0 (attributions.base.channel_sum).

Found on a GPU: the gradient of a B-cosified model differed between CUDA and the CPU by 150 % of its largest value,
because both were float noise. B-cosification's first layer is (W, -W) / 2 on [x, 1 - x], so d logit / dx and
d logit / d(1 - x) are equal and opposite and their channel sum is zero in exact arithmetic (1e-7 of the channels'
magnitude in float32), yet GridPG scored that noise at up to 42 %.
"""

import captum.attr as ca
import pytest
import torch
from torch import Tensor

from faithbench.attributions import get_method
from faithbench.attributions.base import CANCELLED_EPS, cancelling_sum, channel_sum, module_by_name
from faithbench.models import load_model
from faithbench.models.adapter import ModelAdapter
from faithbench.models.bcosify import bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.encoding import bcos_inverse
from faithbench.models.nets.architectures import ConvDigitNet, bcos_digit_cnn
from faithbench.models.truth.image_data import truth_images

GEN = torch.Generator().manual_seed(0)
G = torch.randn(3, 1, 5, 5, generator=GEN)


def test_exact_and_rounding_cancellations_are_zero_and_everything_else_is_the_plain_sum():
    assert torch.equal(channel_sum(torch.cat([G, -G], 1)), torch.zeros(3, 5, 5))
    noise = torch.cat([G, -G * (1 + 1e-7)], 1)  # float32 rounding of two backward paths
    assert torch.equal(channel_sum(noise), torch.zeros(3, 5, 5))
    real = torch.cat([G, -0.999 * G], 1)  # a 1e-3 residue is a map, however small
    assert torch.equal(channel_sum(real), real.sum(1))
    assert channel_sum(real).abs().max() > 0


def test_only_the_cancelled_samples_of_a_batch_are_zeroed():
    maps = torch.cat([G, torch.cat([-G[:1], G[1:]])], 1)  # sample 0 cancels, samples 1 and 2 double
    out = channel_sum(maps)
    assert torch.equal(out[0], torch.zeros(5, 5))
    assert torch.equal(out[1:], 2 * G[1:, 0])


def test_the_threshold_is_in_the_dtypes_epsilons():
    g = G.double()  # built in float64: in float32, 1 - 1e-9 is 1 and the residue would vanish before the test
    residue = torch.cat([g, -g * (1 - 1e-9)], 1)  # a 1e-9 residue: a map to float64's precision, zero to float32's
    assert channel_sum(residue).abs().max() > 0 and torch.equal(channel_sum(residue), residue.sum(1))
    assert torch.equal(channel_sum(residue.float()), torch.zeros(3, 5, 5))
    half = torch.cat([G, -0.999 * G], 1).to(torch.bfloat16)  # bf16's own epsilon (7.8e-3) would zero it
    assert channel_sum(half).abs().max() > 0
    # residue r max|g| against channels of magnitude (2 - r) max|g|: zero up to r = 2 x the line, a map above it
    line = CANCELLED_EPS * torch.finfo(torch.float64).eps
    assert channel_sum(torch.cat([g, -g * (1 - line)], 1)).abs().max() == 0
    assert channel_sum(torch.cat([g, -g * (1 - 4 * line)], 1)).abs().max() > 0


def test_one_channel_and_token_maps_are_summed_as_they_are():
    tiny = torch.full((2, 1, 4, 4), 1e-30)
    assert torch.equal(channel_sum(tiny), tiny[:, 0])
    tokens = torch.randn(2, 384, 7, generator=GEN)  # text: (B, D, T)
    assert torch.equal(channel_sum(tokens), tokens.sum(1))


def bcosified_cnn() -> ModelAdapter:
    torch.manual_seed(0)
    net = bcosify(ConvDigitNet(), image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, num_classes=10)
    return ModelAdapter("bcosified", "bcosified", net.eval(), bcos_inverse(1), 10, (28, 28), activation="sigmoid")


def test_the_gradient_of_a_bcosified_model_is_zero_and_its_contributions_are_not():
    model, images, targets = bcosified_cnn(), torch.rand(4, 1, 28, 28, generator=GEN), torch.tensor([0, 3, 5, 9])
    x = model.encode(images).requires_grad_(True)
    grad = torch.autograd.grad(model(x).gather(1, targets.view(-1, 1)).sum(), x)[0]
    scale = grad.abs().amax()
    assert scale > 0 and grad.sum(1).abs().amax() < 1e-6 * scale  # the channels cancel to rounding
    for name in ("gradient", "guided_backprop"):
        assert torch.equal(get_method(name).attribute(model, model.encode(images), targets), torch.zeros(4, 28, 28))
    contributions = get_method("input_x_gradient").attribute(model, model.encode(images), targets)
    assert contributions.abs().amax() > 0.1 * scale  # x * d/dx + (1 - x) * d/d(1 - x) = (2x - 1) d/dx: no cancelling


@pytest.mark.parametrize("name", ["gradient", "input_x_gradient"])
def test_a_bcos_model_trained_as_such_keeps_its_maps(name):
    torch.manual_seed(0)
    model = ModelAdapter("bcos", "bcos", bcos_digit_cnn().eval(), bcos_inverse(1), 10, (28, 28), activation="sigmoid")
    images, targets = torch.rand(4, 1, 28, 28, generator=GEN), torch.tensor([0, 3, 5, 9])
    maps = get_method(name).attribute(model, model.encode(images), targets)
    assert (maps.flatten(1).abs().amax(1) > 0).all()


# ----------------------------------------------------------------------------- GradCAM's channel terms, per location


def test_cancelling_sum_zeroes_each_entry_that_cancels_and_sums_the_rest():
    terms = torch.cat([G, -G * (1 + 1e-7), 0.5 * G], 1)  # entry by entry: 0.5 G, and below: a cancelled column
    terms[:, 2, 1, :] = 0  # row 1 of every sample: G - G (1 + 1e-7) only, rounding
    out = cancelling_sum(terms)
    assert out.shape == (3, 1, 5, 5)
    assert torch.equal(out[:, 0, 1], torch.zeros(3, 5))
    keep = torch.ones(5, dtype=torch.bool)
    keep[1] = False
    assert torch.equal(out[:, 0, keep], terms.sum(1)[:, keep])


def _truth_cam(relu: bool) -> tuple[Tensor, Tensor, Tensor]:
    """GradCAM of the hand-set ``truth_additive`` model on 6 tier images: ours, Captum's, and |sum| / sum |terms|."""
    model = load_model("truth_additive")
    x = model.encode(truth_images(800)[0][[261, 362, 483, 710, 775, 794]])
    targets = model.module(x).argmax(1)
    ours = get_method("gradcam", relu=relu, upsample="nearest").attribute(model, x, targets)
    layer = module_by_name(model.module, model.conv_layer)
    raw = ca.LayerGradCam(model.module, layer).attribute(x.clone().requires_grad_(), target=targets)
    acts: list[Tensor] = []
    hook = layer.register_forward_hook(lambda m, i, o: acts.append(o))
    out = model.module(x.clone().requires_grad_())
    hook.remove()
    (grad,) = torch.autograd.grad(out.gather(1, targets[:, None]).sum(), acts)
    terms = grad.mean(dim=(2, 3), keepdim=True) * acts[0].detach()
    ratio = terms.sum(1, keepdim=True).abs() / terms.abs().sum(1, keepdim=True).clamp_min(1e-30)
    up = (28, 28)
    return ours, ca.LayerAttribution.interpolate(raw, up)[:, 0], ca.LayerAttribution.interpolate(ratio, up)[:, 0]


def test_gradcam_of_the_hand_set_model_is_captums_with_its_cancelled_cells_zero():
    """The tier's detector cells balance to 1e-11 (3e-8 of their terms): the kernels' sign, not the model's."""
    ours, captum, ratio = _truth_cam(relu=False)
    cancelled = (ratio <= CANCELLED_EPS * torch.finfo(torch.float32).eps) & (ratio > 0)
    assert cancelled.any()  # cells the kernels left at a few ulps (on this CPU: 5 of the 6 images)
    assert captum[cancelled].abs().max() > 0 and torch.equal(ours[cancelled], torch.zeros(int(cancelled.sum())))
    torch.testing.assert_close(ours[~cancelled], captum[~cancelled], rtol=1e-5, atol=1e-7)
    relu_ours = _truth_cam(relu=True)[0]
    assert torch.equal(relu_ours, ours.clamp(min=0))
