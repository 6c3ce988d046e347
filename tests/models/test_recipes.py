"""The zoo's new architectures, the canvas augmentation and the recipe factories (no training)."""

import math
from functools import partial

import pytest
import torch
from bcos.common import explanation_mode
from bcos.modules import BcosConv2d, BcosLinear
from torch import nn

from faithbench.models import zoo
from faithbench.models.bcosify import bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD, Split
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.nets.architectures import (
    GapDigitNet,
    bcos_digit_cnn,
    bcos_digit_vit,
    bcos_digit_vitc,
    bcos_gap_cnn,
)
from faithbench.models.zoo.entries import RECIPES
from faithbench.models.zoo.recipes import bcos_cnn, bcosified
from faithbench.models.zoo.training import accuracy, random_placement, train_classifier
from tests.models.test_native import _LeafPositionalEmbedding, images


def test_gap_cnn_takes_any_size_and_its_stage_one_rewrite_is_exact():
    torch.manual_seed(0)
    model = GapDigitNet().eval()
    assert model(torch.rand(2, 1, 84, 84)).shape == (2, 10)
    converted = bcosify(
        model, image_channels=1, mean=MNIST_MEAN, std=MNIST_STD, b=1, keep_bias=True, avgpool_for_maxpool=False
    )
    x = images(3)
    with torch.no_grad():
        expected = model(normalized(MNIST_MEAN, MNIST_STD)(x))
        torch.testing.assert_close(converted(bcos_inverse(1)(x)), expected, rtol=1e-4, atol=1e-5)


def test_bcos_cnn_sets_b_and_maxout_everywhere():
    net = bcos_digit_cnn(b=1.5, max_out=2)
    layers = [m for m in net.modules() if isinstance(m, BcosConv2d)]
    assert {m.b for m in layers} == {1.5}
    assert {m.max_out for m in layers[:-1]} == {2} and layers[-1].max_out == 1  # the class layer is plain
    assert net(torch.rand(2, 2, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("b", [1.0, 2.5])
def test_bcos_gap_cnn_is_complete_at_any_b_with_maxout(b):
    torch.manual_seed(0)
    net = bcos_gap_cnn(b=b, max_out=2).eval()
    layers = [m for m in net.modules() if isinstance(m, BcosConv2d | BcosLinear)]
    assert {m.b for m in layers} == {b} and {getattr(m, "max_out", 1) for m in layers[:-1]} == {2}
    x = bcos_inverse(1)(images(1, side=84)).requires_grad_(True)  # any size: a 3 x 3 grid
    with explanation_mode(net):
        logit = net(x)[0, 3]
    (g,) = torch.autograd.grad(logit, x)
    torch.testing.assert_close((x * g).sum(), (logit + math.log(9)).detach(), rtol=1e-4, atol=1e-6)


def test_bcos_vit_is_the_tpami_config_and_complete_counting_the_positional_embedding():
    torch.manual_seed(0)
    model = bcos_digit_vit(depth=2, dim=32).eval()
    assert all(m.b == 2 for m in model.modules() if isinstance(m, BcosLinear))
    assert not [n for n, p in model.named_parameters() if n.endswith("bias")]
    assert model[1].logit_bias == pytest.approx(-math.log(9))
    _assert_complete_with_positions(model, bcos_inverse(1)(images(1)), sample=0, target=4)


def _assert_complete_with_positions(model, x, sample, target):
    """W(x)x of a token-classifying B-cos ViT plus its positional embedding's contribution is the logit minus bias."""
    vit = model[0].vit  # every token classified, then the mean
    pe = _LeafPositionalEmbedding(vit.positional_embedding)
    vit.positional_embedding = pe
    x = x.requires_grad_(True)
    with explanation_mode(model):
        logit = model(x)[sample, target]
    gx, gpe = torch.autograd.grad(logit, [x, pe.value])
    total = (x[sample] * gx[sample]).sum() + (pe.value * gpe).sum()
    torch.testing.assert_close(total, (logit + math.log(9)).detach(), rtol=1e-4, atol=1e-5)


def test_bcos_vitc_is_the_vit_with_a_bcos_conv_stem_and_complete_counting_the_positional_embedding():
    torch.manual_seed(0)
    model = bcos_digit_vitc(depth=2, dim=32, stem=(8, 16, 32)).eval()
    vit = model[0].vit
    stem = [m for m in vit.to_patch_embedding.conv_stem if isinstance(m, BcosConv2d)]
    assert [(m.linear.out_channels, m.linear.stride, m.b) for m in stem] == [
        (8, (2, 2), 2),
        (16, (2, 2), 2),
        (32, (2, 2), 2),
    ]
    assert not [n for n, p in model.named_parameters() if n.endswith("bias")]
    x = bcos_inverse(1)(images(2))
    assert vit.to_patch_embedding(x).shape == (2, 4, 4, 32)  # the ViT's 4 x 4 tokens, through 3 stride-2 convs
    _assert_complete_with_positions(model, x, sample=1, target=6)


def test_the_vit_stem_recipes_differ_only_in_the_architecture():
    vit, vitc = RECIPES.get("bcos_vit_mnist"), RECIPES.get("bcos_vitc_mnist")
    assert vit.params == vitc.params and vit.family == vitc.family == "bcos" and vitc.is_vit
    assert zoo.recipe_hash("bcos_vit_mnist") != zoo.recipe_hash("bcos_vitc_mnist")


def test_random_placement_keeps_every_pixel_on_a_black_canvas():
    x = torch.rand(16, 1, 28, 28)
    out = random_placement(x, 56, torch.Generator().manual_seed(0))
    assert out.shape == (16, 1, 56, 56)
    torch.testing.assert_close(out.sum(dim=(1, 2, 3)), x.sum(dim=(1, 2, 3)))
    first_rows = out.sum(dim=(1, 3)).ne(0).float().argmax(dim=1)
    assert len(set(first_rows.tolist())) > 4  # placed at different positions
    with pytest.raises(ValueError, match="cannot hold"):
        random_placement(x, 20, torch.Generator())


def test_factories_record_only_deviations_so_the_main_recipes_keep_their_hashes():
    head = {"target_encoding": "uniform", "classifier_before_pooling": True}  # recorded always (issue 25)
    base = bcosified("x", "cnn_mnist", GapDigitNet, "d", epochs=1, lr=1e-3)
    assert base.params == {"epochs": 1, "lr": 1e-3, "seed": 0, **head}
    variant = bcosified("x", "cnn_mnist", GapDigitNet, "d", epochs=1, lr=1e-3, b=1.5, keep_bias=True, canvas=42)
    assert variant.params == {"epochs": 1, "lr": 1e-3, "seed": 0, **head, "canvas": 42, "b": 1.5, "keep_bias": True}
    model = variant.architecture()
    assert {m.b for m in model.modules() if isinstance(m, BcosConv2d | BcosLinear)} == {1.5}
    assert any(isinstance(m, nn.Conv2d) and m.bias is not None for m in model.modules())
    uniform = {"target_encoding": "uniform"}
    assert bcos_cnn("y", b=2).params == {"epochs": 4, "lr": 1e-3, "seed": 0, **uniform}
    assert bcos_cnn("y", b=2.5, max_out=2).params == {
        "epochs": 4,
        "lr": 1e-3,
        "seed": 0,
        "b": 2.5,
        "max_out": 2,
        **uniform,
    }
    assert bcos_cnn("y", b=2, gap=True).params["classifier_before_pooling"] is True


def test_every_recipe_builds_its_architecture_and_names_known_dependencies():
    for name, recipe in RECIPES.items():
        assert all(d in RECIPES for d in recipe.depends), name
        assert len(zoo.recipe_hash(name)) == 64
    assert len({zoo.recipe_hash(n) for n in RECIPES}) == len(RECIPES)


def test_the_per_epoch_held_out_log_does_not_change_the_weights():
    """Issue 25 item 11 reads the training cost from the builds' per-epoch accuracies: logging them must not move a
    single bit of the trained model (the evaluation runs in eval mode and draws no training randomness)."""
    gen = torch.Generator().manual_seed(0)
    data = Split(torch.rand(96, 1, 28, 28, generator=gen), torch.randint(0, 10, (96,), generator=gen))

    def trained(log: bool) -> tuple[dict, list]:
        torch.manual_seed(0)
        net = GapDigitNet()
        curve = train_classifier(
            net,
            normalized((0.5,), (0.5,)),
            data,
            epochs=2,
            lr=1e-3,
            seed=0,
            batch_size=32,
            shift=2,
            after_epoch=partial(accuracy, encode=normalized((0.5,), (0.5,)), data=data) if log else None,
        )
        return net.state_dict(), curve

    (logged, curve), (plain, none) = trained(True), trained(False)
    assert none == [] and len(curve) == 2 and all(0 <= a <= 1 for a in curve)
    assert logged.keys() == plain.keys()
    assert all(torch.equal(logged[k], plain[k]) for k in plain)


def test_training_bars_follow_tqdm_disable_set_after_import(monkeypatch):
    """--no-progress sets TQDM_DISABLE after tqdm was imported, which tqdm itself never reads again."""
    from faithbench.models.zoo.training import progress_bar

    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert progress_bar(total=3).disable
    monkeypatch.delenv("TQDM_DISABLE")
    bar = progress_bar(total=3)
    assert not bar.disable
    bar.close()
