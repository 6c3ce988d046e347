"""The ground-truth tier's hand-set models and data: known answers that pin the exact attribution."""

import copy
import math

import pytest
import torch
from captum.attr import DeepLift, IntegratedGradients

from faithbench.attributions import get_method
from faithbench.models import MODELS, load_model
from faithbench.models.adapter import ModelAdapter, input_x_gradient
from faithbench.models.data.datasets import DATASETS
from faithbench.models.truth.image_data import truth_images
from faithbench.models.truth.image_exact import IDENTITY, GroundTruth, cell_truth, true_attribution, true_support
from faithbench.models.truth.image_nets import (
    ALPHA,
    DEFAULT_LAYOUT,
    GAMMA,
    PATCH,
    SMALL_LAYOUT,
    TAU,
    Layout,
    additive_patch_net,
    kernels,
    motifs,
    noise_pattern,
    template,
)
from tests.helpers import small_cnn

N = 48


def net64(layout=DEFAULT_LAYOUT, suppressor=True):
    return additive_patch_net(layout, suppressor=suppressor).double()


def cells_of(images, layout=DEFAULT_LAYOUT):
    """(N, K, 7, 7) the cells of images (N, 1, size, size)."""
    g = layout.grid
    return images.view(len(images), g, PATCH, g, PATCH).permute(0, 1, 3, 2, 4).reshape(len(images), -1, PATCH, PATCH)


def logit_gain(net, x, targets):
    """f_t(x) - f_t(0) per sample, float64."""
    with torch.no_grad():
        return (net(x) - net(torch.zeros_like(x))).gather(1, targets.view(-1, 1)).squeeze(1)


# ----------------------------------------------------------------------------- the truth is exact


@pytest.mark.parametrize("suppressor", [True, False])
def test_truth_sums_to_the_logit_minus_the_logit_at_the_black_image_for_every_class(suppressor):
    net = net64(suppressor=suppressor)
    x, _ = truth_images(N, seed=1)
    x = x.double()
    for c in range(4):
        targets = torch.full((N,), c)
        t = true_attribution(net, x, targets)
        assert t.dtype == torch.float64 and t.shape == (N, 28, 28)
        torch.testing.assert_close(t.sum(dim=(1, 2)), logit_gain(net, x, targets), rtol=0, atol=1e-9)
        torch.testing.assert_close(cell_truth(net, x, targets).sum(1), logit_gain(net, x, targets), rtol=0, atol=1e-9)


def test_each_cells_pixels_sum_to_its_cell_truth_and_distractor_and_empty_cells_are_exactly_zero():
    net = net64()
    x, y = truth_images(N)
    t, cells = true_attribution(net, x, y), cell_truth(net, x, y)
    per_cell = cells_of(t.unsqueeze(1)).sum(dim=(2, 3))
    torch.testing.assert_close(per_cell, cells, rtol=0, atol=1e-12)
    distractors = list(DEFAULT_LAYOUT.distractor_cells)
    content = cells_of(x)[:, distractors].flatten(2).amax(2)
    assert (content > 0).sum(1).min() >= 2  # every image has bright distractors ...
    assert (cells[:, distractors] == 0).all()  # ... and none of them contributes anything
    empty = cells_of(x).flatten(2).amax(2) == 0
    assert empty.any() and (cells[empty] == 0).all()


def _masked_values(net, x, n_cells, layout):
    """(2^K, B, C): the logits with only the cells of each coalition (bit k: cell k kept) present."""
    keep = torch.tensor([[(s >> k) & 1 for k in range(n_cells)] for s in range(2**n_cells)], dtype=torch.float64)
    pixel_keep = keep[:, layout.cell_index()]  # (2^K, H, W)
    with torch.no_grad():
        return torch.stack([net(x * m) for m in pixel_keep])


def test_cell_truth_is_the_exact_shapley_banzhaf_and_leave_one_out_value_over_cells():
    """A 3 x 3 board: every coalition of the 9 cells enumerated (absent cells black)."""
    layout = SMALL_LAYOUT
    net = net64(layout)
    x, _ = truth_images(6, seed=3, layout=layout)
    x = x.double()
    n = layout.cells
    values = _masked_values(net, x, n, layout)  # (512, B, C)
    sizes = torch.tensor([bin(s).count("1") for s in range(2**n)])
    for c in range(4):
        v = values[..., c]
        shapley, banzhaf = torch.zeros(len(x), n, dtype=torch.float64), torch.zeros(len(x), n, dtype=torch.float64)
        for k in range(n):
            without = [s for s in range(2**n) if not (s >> k) & 1]
            gain = v[[s | (1 << k) for s in without]] - v[without]  # (2^(n-1), B)
            s = sizes[without]
            weight = torch.tensor(
                [math.factorial(m) * math.factorial(n - m - 1) / math.factorial(n) for m in s], dtype=torch.float64
            )
            shapley[:, k] = (weight.double().view(-1, 1) * gain).sum(0)
            banzhaf[:, k] = gain.mean(0)
        leave_one_out = torch.stack([v[-1] - v[(2**n - 1) ^ (1 << k)] for k in range(n)], dim=1)
        truth = cell_truth(net, x, torch.full((len(x),), c))
        for other in (shapley, banzhaf, leave_one_out):
            torch.testing.assert_close(other, truth, rtol=0, atol=1e-9)
    assert (truth != 0).any()


def test_pixel_truth_is_the_pixels_shapley_value_in_a_detector_cell_that_holds_its_own_motif():
    """The motif's pixels are symmetric players of the thresholded detector: exhaustive over their coalitions."""
    net = net64()
    x, y = truth_images(200, seed=5)
    cell = DEFAULT_LAYOUT.detector_cells[0]
    present = cells_of(x)[:, cell].flatten(1).amax(1) > 0
    i = int(((y == 0) & present).nonzero()[0])  # a plus (9 pixels) in the first detector cell
    image, label = x[i : i + 1].double(), y[i : i + 1]
    r, col = divmod(cell, DEFAULT_LAYOUT.grid)
    pixels = [(r * PATCH + a, col * PATCH + b) for a, b in motifs()[0].nonzero().tolist()]
    n = len(pixels)
    coalitions = torch.ones(2**n, 1, 28, 28, dtype=torch.float64)
    for s in range(2**n):
        for j, (a, b) in enumerate(pixels):
            if not (s >> j) & 1:
                coalitions[s, 0, a, b] = 0.0
    with torch.no_grad():
        v = net(image * coalitions)[:, int(label)]
    truth = true_attribution(net, image, label)[0]
    for j, (a, b) in enumerate(pixels):
        without = [s for s in range(2**n) if not (s >> j) & 1]
        weight = torch.tensor(
            [math.factorial(bin(s).count("1")) * math.factorial(n - bin(s).count("1") - 1) for s in without]
        )
        phi = (weight.double() / math.factorial(n) * (v[[s | (1 << j) for s in without]] - v[without])).sum()
        assert math.isclose(float(phi), float(truth[a, b]), abs_tol=1e-12)
    assert float(truth[pixels[0]]) > 0


def test_input_x_gradient_equals_the_truth_on_the_bias_free_cells_and_overshoots_on_the_thresholded_ones():
    net = net64()
    x, y = truth_images(N)
    x = x.double()
    ixg = cells_of(input_x_gradient(net, x, y, explanation=False))
    truth = cells_of(true_attribution(net, x, y).unsqueeze(1))
    linear = [DEFAULT_LAYOUT.linear_cell, DEFAULT_LAYOUT.suppressor_cell]
    torch.testing.assert_close(ixg[:, linear], truth[:, linear], rtol=0, atol=1e-12)
    detector = list(DEFAULT_LAYOUT.detector_cells)
    active = truth[:, detector].flatten(2).sum(2) > 0
    ixg_sum, truth_sum = ixg[:, detector].flatten(2).sum(2), truth[:, detector].flatten(2).sum(2)
    # the threshold: x . grad counts w s, the logit only w (s - TAU)
    torch.testing.assert_close(ixg_sum[active] - truth_sum[active], torch.full_like(truth_sum[active], ALPHA * TAU))
    assert active.sum() > 10


def test_deeplift_rescale_and_integrated_gradients_reproduce_the_pixel_truth():
    """Both are the Aumann-Shapley split of each channel here (DeepLift exactly, IG up to quadrature)."""
    net = net64()
    x, y = truth_images(16)
    x = x.double().requires_grad_(True)
    truth = true_attribution(net, x.detach(), y)
    deeplift = DeepLift(copy.deepcopy(net)).attribute(x, baselines=0.0, target=y)[:, 0]
    torch.testing.assert_close(deeplift, truth, rtol=0, atol=1e-12)
    ig = IntegratedGradients(net).attribute(x, baselines=0.0, target=y, n_steps=2000, method="riemann_middle")
    torch.testing.assert_close(ig[:, 0], truth, rtol=0, atol=2e-3)


def test_the_suppressor_cell_carries_no_class_information_yet_its_truth_cancels_the_noise_in_the_linear_cell():
    net = net64()
    x, y = truth_images(N)
    cells = cell_truth(net, x, y)
    lin, sup = DEFAULT_LAYOUT.linear_cell, DEFAULT_LAYOUT.suppressor_cell
    noise = cells_of(x)[:, sup]
    a = noise.amax(dim=(1, 2))  # the noise amplitude
    assert torch.equal(noise, a.view(-1, 1, 1) * noise_pattern())  # the cell is the shared noise alone
    templates = torch.stack([template(m, 1.0) for m in motifs()]).double()
    leak = (templates * noise_pattern()).sum(dim=(1, 2))  # <t_c, u>
    torch.testing.assert_close(cells[:, sup], -GAMMA * a.double() * leak[y], rtol=0, atol=1e-6)  # float32 weights
    assert (cells[:, sup].abs() > 1e-3).sum() > N // 2  # nonzero, though the noise is independent of the class
    motif_part = cells_of(x)[:, lin] - a.view(-1, 1, 1) * noise_pattern()
    signal = GAMMA * (templates[y] * motif_part.double()).sum(dim=(1, 2))
    torch.testing.assert_close(cells[:, lin] + cells[:, sup], signal, rtol=0, atol=1e-6)  # the noise cancels
    assert (cell_truth(net64(suppressor=False), x, y)[:, sup] == 0).all()


def test_support_by_cell_and_by_pixel():
    net = net64()
    x, y = truth_images(8)
    t, cells = true_attribution(net, x, y), cell_truth(net, x, y)
    by_cell = true_support(net, x, y)
    assert torch.equal(by_cell, (cells > 0)[:, DEFAULT_LAYOUT.cell_index()])
    assert torch.equal(true_support(net, x, y, "pixel"), t > 0)
    with pytest.raises(ValueError, match="unknown resolution 'cell'; valid: patch, pixel"):
        true_support(net, x, y, "cell")


# ----------------------------------------------------------------------------- the construction


def test_detectors_fire_on_their_own_motif_only():
    weights, biases = kernels()
    responses = torch.einsum("mij,nij->mn", weights[:4], motifs())
    own, foreign = responses.diagonal(), responses[~torch.eye(4, dtype=torch.bool)]
    assert torch.allclose(own, torch.ones(4))  # at intensity v the response is v >= 0.5
    assert foreign.max() < TAU < 0.5 and torch.allclose(biases[:4], torch.full((4,), -TAU))
    assert (biases[4:] == 0).all()


def test_layouts_are_checked():
    with pytest.raises(ValueError, match="distinct evidence cells in 0..8"):
        Layout(grid=3, detector_cells=(0, 9), linear_cell=2, suppressor_cell=6)
    assert DEFAULT_LAYOUT.distractor_cells == (0, 1, 2, 3, 4, 7, 8, 11, 12, 13, 14, 15)


def test_truth_refuses_other_models_and_wrong_shapes():
    with pytest.raises(TypeError, match="PatchAdditiveNet only, got Sequential"):
        true_attribution(small_cnn(), torch.zeros(1, 1, 28, 28), torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"inputs must be \(B, 1, 28, 28\)"):
        true_attribution(net64(), torch.zeros(1, 1, 21, 21), torch.zeros(1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets must have shape \(2,\)"):
        true_attribution(net64(), torch.zeros(2, 1, 28, 28), torch.zeros(1, dtype=torch.long))


# ----------------------------------------------------------------------------- the data


def test_the_data_is_deterministic_in_range_and_balanced():
    x, y = truth_images(200, seed=7)
    x2, y2 = truth_images(200, seed=7)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, truth_images(200, seed=8)[0])
    assert x.shape == (200, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.long
    assert x.min() >= 0 and x.max() <= 1
    assert y.bincount().tolist() == [50] * 4
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        truth_images(0)


def test_the_model_classifies_its_data_and_needs_the_suppressor():
    """100 % with the suppressor; without it the shared noise (plus-like) misleads it where the linear cell is
    the only evidence."""
    x, y = truth_images(1000)
    evidence = cells_of(x)[:, list(DEFAULT_LAYOUT.detector_cells)].flatten(1).amax(1) > 0
    with torch.no_grad():
        right = additive_patch_net()(x).argmax(1) == y
        without = additive_patch_net(suppressor=False)(x).argmax(1) == y
    assert right.float().mean() == 1.0
    assert without.float().mean() < 0.98 and without[~evidence].float().mean() < 0.9


# ----------------------------------------------------------------------------- registry, adapter and data set


@pytest.mark.parametrize("name", ["truth_additive", "truth_additive_nosup"])
def test_registered_adapters_carry_their_truth(name):
    spec = MODELS.get(name)
    assert (spec.family, spec.source, spec.dataset) == ("standard", "hand-set", "truth")
    model = load_model(name)
    assert isinstance(model.truth, GroundTruth) and model.num_classes == 4 and model.input_size == (28, 28)
    x, y = truth_images(4)
    assert torch.equal(model.encode(x), x)  # the model reads the image itself: baseline 0 is black
    torch.testing.assert_close(model.truth(model.encode(x), y), true_attribution(model, x, y))
    assert torch.equal(model.truth.cells, DEFAULT_LAYOUT.cell_index())
    gradcam = get_method("gradcam").attribute(model, x, y)  # conv_layer names the detectors
    assert gradcam.shape == (4, 28, 28)
    assert ModelAdapter("plain", "standard", small_cnn(), IDENTITY, 4, (28, 28)).truth is None  # the default


def test_truth_data_set_is_registered():
    spec = DATASETS.get("truth")
    assert spec.modality == "image" and not spec.needs_root and not spec.zoo
    data = spec.load(None)
    images, labels = truth_images(1000, 0)
    assert data.name == "truth-1000-seed0" and torch.equal(data.images, images) and torch.equal(data.labels, labels)
