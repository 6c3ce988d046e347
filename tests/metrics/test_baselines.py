"""Removal baselines are defined in image space and encoded per model, so every family sees the same image change."""

import pytest
import torch

import faithbench
from faithbench.config import from_table
from faithbench.errors import UserError
from faithbench.metrics._perturb import probabilities_after_removal
from faithbench.metrics.baselines import BaselineConfig, image_baseline, removal_baseline, running_mean_baseline
from faithbench.metrics.deletion import DeletionConfig
from faithbench.metrics.erasure import ErasureConfig
from faithbench.models.encoding import bcos_inverse, normalized

GEN = torch.Generator().manual_seed(0)
ENCODINGS = [normalized((0.1307,), (0.3081,)), bcos_inverse(1)]


def test_image_baselines_by_hand():
    images = torch.stack([torch.zeros(1, 4, 4), torch.ones(1, 4, 4)])  # mean colour 0.5
    assert image_baseline(images, "mean").flatten().tolist() == [0.5]
    assert image_baseline(images, "value", value=0.25).shape == (1, 1, 1, 1)
    blurred = image_baseline(images, "blur", blur_sigma=0.25)
    torch.testing.assert_close(blurred, images)  # blurring a constant image changes nothing
    spot = torch.zeros(1, 1, 9, 9)
    spot[0, 0, 4, 4] = 1.0
    blurred = image_baseline(spot, "blur", blur_sigma=0.1)
    assert blurred[0, 0, 4, 4] < 1.0 and blurred[0, 0, 4, 3] > 0 and blurred.sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS, ids=lambda e: e.name)
def test_encoded_baseline_is_the_image_baseline_encoded(encoding):
    images = torch.rand(3, 1, 8, 8, generator=GEN)
    base = removal_baseline(encoding, images, images, "value", value=0.0)
    torch.testing.assert_close(base, encoding(torch.zeros(1, 1, 1, 1)))
    assert removal_baseline(encoding, images, images, "model-input-zero") == 0.0
    assert removal_baseline(encoding, images, images, "blur").shape == (3, encoding.channels, 8, 8)


@pytest.mark.parametrize("kind", ["mean", "value", "blur"])
def test_every_family_sees_the_same_image_change(kind):
    """Deleting pixels with an image-space baseline gives, for a normalised and for a B-cos model, model
    inputs that decode to the same perturbed image -- unlike 0 in model-input space."""
    images = torch.rand(2, 1, 6, 6, generator=GEN)
    ranks = torch.randperm(36, generator=GEN).view(1, 6, 6).expand(2, 6, 6).contiguous()
    decoded = []
    for enc in ENCODINGS:
        seen = []

        def forward(x, enc=enc, seen=seen):
            seen.append(enc.decode(x))
            return torch.zeros(len(x), 2)

        x = enc(images)
        base = removal_baseline(enc, images, images, kind, value=0.3)
        probabilities_after_removal(
            forward,
            x,
            ranks,
            torch.zeros(2, dtype=torch.long),
            job_sample=torch.arange(2),
            job_k=torch.tensor([10, 10]),
            job_keep_top=torch.tensor([False, False]),
            baseline=base,
            activation="identity",
            chunk_size=8,
        )
        decoded.append(torch.cat(seen))
    torch.testing.assert_close(decoded[0], decoded[1])
    removed = ranks < 10
    expected = image_baseline(images, kind, value=0.3).expand_as(images)
    torch.testing.assert_close(decoded[0][:, 0][removed], expected[:, 0][removed])
    torch.testing.assert_close(decoded[0][:, 0][~removed], images[:, 0][~removed])


def test_model_input_zero_differs_across_families():
    images = torch.full((1, 1, 2, 2), 0.5)
    std, bcos = ENCODINGS
    assert std.decode(torch.zeros(1, 1, 2, 2)).flatten()[0] == pytest.approx(0.1307)  # grey-ish: the mean
    assert bcos.decode(torch.zeros(1, 2, 2, 2)).flatten()[0] == 0.0  # the impossible [0, 0] pair decodes to black
    assert removal_baseline(std, images, images, "model-input-zero") == 0.0


def test_configs_validate_and_default_to_the_mean_colour():
    for cls in (BaselineConfig, DeletionConfig, ErasureConfig):
        assert cls().baseline == "mean"
    assert ErasureConfig().target == "predicted"
    with pytest.raises(UserError, match="baseline.*valid.*model-input-zero"):
        from_table(DeletionConfig, {"baseline": "grey"}, "[deletion]")
    with pytest.raises(UserError, match=r"baseline_value must be a pixel value in \[0, 1\]"):
        from_table(ErasureConfig, {"baseline": "value", "baseline_value": 2.0}, "[erasure]")
    with pytest.raises(UserError, match="target.*predicted"):
        from_table(ErasureConfig, {"target": "truth"}, "[erasure]")


def test_running_mean_baseline_by_hand():
    # two channels; step 1 removes pixel (0, 0), step 2 pixels (0, 1) and (1, 0); N = 8 values, mean 10 / 8
    x = torch.tensor([[[[4.0, 2.0], [0.0, 0.0]], [[4.0, 0.0], [0.0, 0.0]]]])
    ranks = torch.tensor([[[0, 1], [2, 3]]])
    value = running_mean_baseline(x, ranks, torch.tensor([0, 1, 3]))
    m0 = 10 / 8
    m1 = (10 - 8 + 2 * m0) / 8  # the pixel's two values (4, 4) become m0
    m2 = (8 * m1 - 2 + 4 * m1) / 8  # (0, 1) held 2 + 0 and (1, 0) held 0 + 0; four values become m1
    expected = torch.tensor([[m0, m1], [m1, m2]]).expand(1, 2, 2, 2)
    torch.testing.assert_close(value, expected)
    after = torch.where(ranks < 3, value, x)  # the image after step 2 of Quantus' loop: its mean is m2
    assert after.mean().item() == pytest.approx(m2)


def test_per_image_mean_is_a_deletion_baseline_only():
    assert DeletionConfig(baseline="per-image-mean").baseline == "per-image-mean"
    with pytest.raises(ValueError, match="baseline.*per-image-mean"):
        ErasureConfig(baseline="per-image-mean")  # comprehensiveness removes no sequence
    x, maps, y = torch.rand(2, 1, 4, 4, generator=GEN), torch.randn(2, 4, 4, generator=GEN), torch.tensor([0, 1])
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
    with pytest.raises(UserError, match="pixel_insertion: baseline 'per-image-mean'.*Valid for insertion: mean"):
        faithbench.score(net, x, maps, y, metric="pixel_insertion", baseline="per-image-mean")
    with pytest.raises(UserError, match="pixel_insertion: baseline 'per-image-mean'"):  # refused before any model loads
        faithbench.benchmark(
            ["cnn_mnist"], ["gradient"], ["pixel_deletion", "pixel_insertion"], deletion={"baseline": "per-image-mean"}
        )
    ours = faithbench.score(net, x, maps, y, metric="pixel_deletion", baseline="per-image-mean", block_size=1)
    assert ours.shape == (2,) and torch.isfinite(ours).all()
