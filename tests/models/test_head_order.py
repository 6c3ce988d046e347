"""Classifier before global pooling (TPAMI App. C, B-cosification's gap_reorder) and the B-cos target encoding."""

import math

import pytest
import torch
import torchvision
from bcos.modules import BcosConv2d, BcosLinear
from torch import nn

from faithbench.models.adapter import input_x_gradient
from faithbench.models.bcosify import bcosify, classify_before_pooling
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import GapDigitNet, bcos_digit_vit, bcos_gap_cnn, digit_vit
from faithbench.models.nets.vit_heads import TokenClassifierViT
from faithbench.models.zoo.recipes import bce_loss
from faithbench.models.zoo.training import classification_loss
from tests.models.test_native import images

# Two positions of a 2-channel feature map: the explained class's evidence (x_L, along its weight [1, 0]) and
# a distractor with a larger norm and a small positive cosine to it (x_R).
X_L, X_R = [1.0, 0.0], [2.0, 10.0]


def _cell_share(head_first: bool) -> float:
    """Share of position L in the positive W(x)x of class 0 with a B-cos head (B = 2) before or after the mean."""
    weight = torch.eye(2)
    if head_first:
        head = BcosConv2d(2, 2, 1, b=2)
        head.linear.weight.data = weight.view(2, 2, 1, 1)
        model = nn.Sequential(head, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    else:
        head = BcosLinear(2, 2, b=2)
        head.linear.weight.data = weight
        model = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)
    x = torch.tensor([X_L, X_R]).T.reshape(1, 2, 1, 2)  # (N, C, H, W): position 0 = L, 1 = R
    contributions = input_x_gradient(model.eval(), x, torch.tensor([0]), explanation=True).sum(dim=1).flatten()
    positive = contributions.clamp(min=0)
    return float(positive[0] / positive.sum())


def test_a_bcos_head_after_pooling_loses_the_cell_and_before_pooling_keeps_it():
    # Pooled first: one |cos| scale for both positions, so each gets its share of w.x: 1 / (1 + 2) = 1/3.
    assert _cell_share(head_first=False) == pytest.approx(1 / 3, rel=1e-5)
    # Classified first: each position's w.x times its own |cos|: 1 * 1 vs 2 * 2 / sqrt(104).
    expected = 1.0 / (1.0 + 4 / math.sqrt(104))
    assert _cell_share(head_first=True) == pytest.approx(expected, rel=1e-5)
    assert expected > 0.5 > 1 / 3


@pytest.mark.parametrize("before", [True, False])
def test_gap_cnn_is_the_same_function_in_either_order(before):
    torch.manual_seed(0)
    model = GapDigitNet(classifier_before_pooling=before).eval()
    assert isinstance(model.head, nn.Conv2d if before else nn.Linear)
    other = GapDigitNet(classifier_before_pooling=not before).eval()
    state = dict(model.state_dict())
    state["head.weight"] = state["head.weight"].reshape(other.head.weight.shape)
    other.load_state_dict(state)
    x = torch.rand(2, 1, 84, 84)
    with torch.no_grad():
        torch.testing.assert_close(model(x), other(x), rtol=1e-5, atol=1e-6)


def test_bcos_gap_cnn_classifies_every_position_before_the_mean():
    net = bcos_gap_cnn(classifier_before_pooling=True)
    kinds = [type(m).__name__ for m in net]
    assert kinds[-4:] == ["BcosConv2d", "AdaptiveAvgPool2d", "Flatten", "LogitLayer"]
    assert [type(m).__name__ for m in bcos_gap_cnn(classifier_before_pooling=False)][-4:] == [
        "AdaptiveAvgPool2d",
        "Flatten",
        "BcosLinear",
        "LogitLayer",
    ]


def test_bcosify_moves_a_pooled_linear_head_before_the_pool_and_stage_one_stays_exact():
    torch.manual_seed(0)
    source = GapDigitNet(classifier_before_pooling=False).eval()  # a user's CNN: pool, flatten, Linear
    kwargs = {"image_channels": 1, "mean": MNIST_MEAN, "std": MNIST_STD, "b": 1, "keep_bias": True}
    converted = bcosify(source, avgpool_for_maxpool=False, **kwargs)
    assert not any(isinstance(m, BcosLinear) for m in converted.modules())
    assert isinstance(converted[1].pool[0][0], BcosConv2d) and isinstance(converted[1].head, nn.Identity)
    kept = bcosify(source, avgpool_for_maxpool=False, classifier_before_pooling=False, **kwargs)
    assert isinstance(kept[1].head, BcosLinear)
    x = images(3)
    with torch.no_grad():
        expected = source(normalized(MNIST_MEAN, MNIST_STD)(x))
        torch.testing.assert_close(converted(bcos_inverse(1)(x)), expected, rtol=1e-4, atol=1e-5)


def test_bcosify_reorders_a_torchvision_resnet_whose_forward_flattens():
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=5).eval()
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    converted = bcosify(resnet, image_channels=3, mean=mean, std=std, b=1, keep_bias=True, avgpool_for_maxpool=False)
    assert isinstance(converted[1].fc, nn.Identity) and isinstance(converted[1].avgpool[0], BcosConv2d)
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        expected = resnet(normalized(mean, std)(x))
        torch.testing.assert_close(converted(torch.cat([x, 1 - x], dim=1)), expected, rtol=1e-4, atol=1e-4)


def test_classify_before_pooling_refuses_an_mlp_head_and_leaves_headless_models_alone():
    mlp = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 4), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="2 Linear layers after the global pool"):
        classify_before_pooling(mlp)
    dense = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 2, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    assert classify_before_pooling(dense) is dense and len(dense) == 4


def test_token_classifier_vit_is_the_simple_vit_when_its_head_is_linear():
    torch.manual_seed(0)
    vit = digit_vit(depth=1, dim=32).eval()
    vit.linear_head.norm = nn.Identity()  # a linear head commutes with the mean over tokens
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(TokenClassifierViT(vit)(x), vit(x), rtol=1e-5, atol=1e-6)
    assert isinstance(bcos_digit_vit(depth=1, dim=32)[0], TokenClassifierViT)
    assert not isinstance(bcos_digit_vit(depth=1, dim=32, classifier_before_pooling=False)[0], TokenClassifierViT)
    converted = bcosify(
        digit_vit(depth=1, dim=32),
        image_channels=1,
        mean=MNIST_MEAN,
        std=MNIST_STD,
        first_layer="to_patch_embedding.linear",
    )
    assert isinstance(converted[1], TokenClassifierViT)


def test_bce_uniform_puts_one_over_c_on_the_other_classes():
    logits, label = torch.tensor([[2.0, -1.0]]), torch.tensor([0])
    softplus = lambda v: math.log1p(math.exp(v))  # noqa: E731 - BCE(l, t) = softplus(l) - t l
    uniform = ((softplus(2) - 2) + (softplus(-1) + 0.5)) / 2  # targets [1, 1/2]
    one_hot = ((softplus(2) - 2) + softplus(-1)) / 2  # targets [1, 0]
    assert classification_loss(logits, label, "bce_uniform").item() == pytest.approx(uniform, rel=1e-6)
    assert classification_loss(logits, label, "bce").item() == pytest.approx(one_hot, rel=1e-6)
    with pytest.raises(ValueError, match="valid: ce, bce, bce_uniform"):
        classification_loss(logits, label, "hinge")


def test_every_vision_bcos_recipe_records_its_target_encoding():
    from faithbench.models.zoo.entries import RECIPES

    vision_bcos = [r for _, r in RECIPES.items() if r.modality == "image" and r.family in ("bcos", "bcosified", "aloe")]
    assert len(vision_bcos) >= 12
    assert {r.params["target_encoding"] for r in vision_bcos} == {"uniform"}
    assert {bce_loss(r.params) for r in vision_bcos} == {"bce_uniform"}
    assert bce_loss({"target_encoding": "one_hot"}) == "bce"
    with pytest.raises(ValueError, match="valid: uniform, one_hot"):
        bce_loss({"target_encoding": "zero"})
    gap = [r for _, r in RECIPES.items() if "gap" in r.name]
    assert all(r.params["classifier_before_pooling"] for r in gap)
    assert RECIPES.get("aloe_vit_mnist").params["classifier_before_pooling"] is False
