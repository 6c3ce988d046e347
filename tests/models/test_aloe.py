"""ALOE's alignment loss: the local term sums over the aligned depths (ALOE Eq. 4) unless told to average."""

from dataclasses import asdict

import pytest
import torch

from faithbench.models.bcosify import bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.aloe import AlignmentConfig, aligned_depths, alignment_loss
from faithbench.models.nets.architectures import digit_vit
from faithbench.models.zoo.entries import RECIPES


def test_local_term_sums_over_three_depths_by_default_and_averages_on_request():
    torch.manual_seed(0)
    teacher = digit_vit(depth=3, dim=16).eval()
    student = bcosify(  # ALOE's probe reads the mean token: SimpleViT's order
        teacher,
        image_channels=1,
        mean=MNIST_MEAN,
        std=MNIST_STD,
        first_layer="to_patch_embedding.linear",
        classifier_before_pooling=False,
    )
    assert aligned_depths(3) == [1, 2, 3]
    x = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    args = (student, teacher, bcos_inverse(1)(x), normalized(MNIST_MEAN, MNIST_STD)(x))
    local_only = {"lambda_global": 0.0, "lambda_local": 1.0}
    with torch.no_grad():
        summed = alignment_loss(*args, AlignmentConfig(**local_only)).item()
        mean = alignment_loss(*args, AlignmentConfig(**local_only, local_reduction="mean")).item()
        global_only = alignment_loss(*args, AlignmentConfig(lambda_global=1.0, lambda_local=0.0)).item()
        both = alignment_loss(*args, AlignmentConfig()).item()
    assert AlignmentConfig().local_reduction == "sum"
    assert mean > 0.01 and summed == pytest.approx(3 * mean, rel=1e-6)
    assert both == pytest.approx(global_only + summed, rel=1e-6)


def test_unknown_reduction_is_refused_and_the_zoo_recipe_records_every_alignment_setting():
    with pytest.raises(ValueError, match="local_reduction 'median'"):
        AlignmentConfig(local_reduction="median")
    assert RECIPES["aloe_vit_mnist"].params["alignment"] == asdict(AlignmentConfig(max_epochs=20, lr=1e-3, seed=0))
    assert RECIPES["aloe_vit_mnist"].params["alignment"]["local_reduction"] == "sum"
