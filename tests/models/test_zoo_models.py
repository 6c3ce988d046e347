"""The offline zoo's real models: accuracy, GridPG-ready confidence, completeness of W(x)x.

The first run builds the zoo into the cache (a few minutes on 2 CPU cores); later runs load it.
"""

import math

import pytest
import torch
from bcos.common import explanation_mode
from bcos.models.vit import SimpleViT

from faithbench.metrics.gridpg import get_preset, make_grids, select_grids
from faithbench.models import load_model, zoo
from faithbench.models.data.splits import image_splits
from tests.models.test_native import _LeafPositionalEmbedding

MIN_ACCURACY = {
    "cnn_mnist": 0.99,
    "bcos_cnn_mnist": 0.95,
    "bcosified_cnn_mnist": 0.98,
    "vit_mnist": 0.9,  # trained on shifts of up to half a cell (the windows GridPG sees)
    "aloe_vit_mnist": 0.92,
    "cnn_gap_mnist": 0.97,
    "bcosified_cnn_gap_mnist": 0.96,
    "bcosified_cnn_gap_mnist_b1": 0.95,
    "bcosified_cnn_gap_mnist_b1_5": 0.95,
    "bcosified_cnn_gap_mnist_b2_5": 0.95,
    "bcosified_cnn_gap_mnist_bias": 0.95,
    "bcos_gap_cnn_mnist_b1": 0.9,
    "bcos_gap_cnn_mnist_b1_25": 0.9,
    "bcos_gap_cnn_mnist_b1_5": 0.9,
    "bcos_gap_cnn_mnist_b2": 0.9,
    "bcos_gap_cnn_mnist_b2_5": 0.9,
    "bcos_gap_cnn_mnist": 0.93,
    "bcos_vit_mnist": 0.9,
    "bcos_vitc_mnist": 0.9,
    "bcosified_vit_mnist": 0.9,
    "cnn_gap_animal": 0.9,  # animal-mnist: below MNIST's ceiling
    "bcosified_cnn_gap_animal": 0.9,
    "bcosified_cnn_gap_animal_b1": 0.88,
    "bcosified_cnn_gap_animal_b1_5": 0.9,
    "bcosified_cnn_gap_animal_b2_5": 0.9,
    "bcos_gap_cnn_animal": 0.88,
    "bcos_gap_cnn_animal_b1": 0.8,
    "bcos_gap_cnn_animal_b1_25": 0.8,
    "bcos_gap_cnn_animal_b1_5": 0.8,
    "bcos_gap_cnn_animal_b2": 0.8,
    "bcos_gap_cnn_animal_b2_5": 0.8,
}
MIN_ACCURACY |= {f"{p}_idsds": MIN_ACCURACY[p] for p in ("cnn_mnist", "bcos_cnn_mnist", "bcosified_cnn_mnist")}


@pytest.fixture(scope="module")
def test_split():
    return image_splits("mnist")[1]


@pytest.fixture(scope="module", params=[n for n, r in zoo.RECIPES.items() if r.modality == "image"])
def adapter(request):
    return load_model(request.param)


def test_accuracy_is_reported_and_good_enough(adapter):
    test_split = image_splits(zoo.RECIPES.get(adapter.name).dataset)[1]
    assert adapter.info["test_accuracy"] >= MIN_ACCURACY[adapter.name]
    with torch.no_grad():
        logits = adapter(adapter.encode(test_split.images))
    measured = (logits.argmax(1) == test_split.labels).float().mean().item()
    assert measured == pytest.approx(adapter.info["test_accuracy"], abs=1e-6)


def test_every_class_has_confident_images_for_gridpg(adapter):
    test_split = image_splits(zoo.RECIPES.get(adapter.name).dataset)[1]
    with torch.no_grad():
        logits = adapter(adapter.encode(test_split.images))
    correct = logits.argmax(1) == test_split.labels
    confident = correct & (logits.max(1).values.sigmoid() > 0.5)  # the bcos-v2 availability rule
    per_class = torch.bincount(test_split.labels[confident], minlength=10)
    assert per_class.min() >= 20, per_class.tolist()
    preset = get_preset("bcos-v2")
    sel = select_grids(preset, test_split.labels, logits, is_vit=adapter.is_vit, n_grids=20)
    assert sel.indices.shape[0] == 20


def _native_completeness_gap(adapter, x, t):
    """|sum of contributions (plus the input-independent terms the spec lists) - (logit - bias)|."""
    module = adapter.module
    x = x.clone().requires_grad_(True)
    leaves = [x]
    vit = next((m for m in module.modules() if isinstance(m, SimpleViT)), None)
    if adapter.is_vit:
        pe = _LeafPositionalEmbedding(vit.positional_embedding)
        vit.positional_embedding = pe
    try:
        with explanation_mode(module):
            logit = module(x)[0, t]
        if adapter.is_vit:
            leaves.append(pe.value)
        grads = torch.autograd.grad(logit, leaves)
    finally:
        if adapter.is_vit:
            vit.positional_embedding = pe.original
    reference = module[0].mean if adapter.family in ("bcosified", "aloe") else 0.0  # layer-0 mean subtraction
    total = ((x - reference) * grads[0]).sum()
    if adapter.is_vit:
        total = total + (leaves[1] * grads[1]).sum()
    return (total - (logit - adapter.logit_bias)).abs().item(), abs(logit.item() - adapter.logit_bias)


COMPLETE = [  # every bias-free B-cos family and architecture of the zoo
    "bcos_cnn_mnist",
    "bcosified_cnn_mnist",
    "aloe_vit_mnist",
    "bcosified_cnn_gap_mnist",
    "bcos_gap_cnn_mnist_b2",
    "bcos_gap_cnn_mnist",
    "bcos_vit_mnist",
    "bcos_vitc_mnist",
    "bcosified_vit_mnist",
]


@pytest.mark.parametrize("name", COMPLETE)
def test_native_explanations_of_zoo_models_are_complete(name, test_split):
    adapter = load_model(name)
    assert adapter.logit_bias == pytest.approx(-math.log(9))
    for i in (0, 17, 523):
        x = adapter.encode(test_split.images[i : i + 1])
        gap, scale = _native_completeness_gap(adapter, x, int(test_split.labels[i]))
        assert scale > 0.1
        assert gap <= 1e-4 * max(1.0, scale)


@pytest.mark.parametrize("name", ["bcos_cnn_mnist", "bcosified_cnn_mnist", "aloe_vit_mnist"])
def test_native_explanations_run_on_whole_grids(name, test_split):
    adapter = load_model(name)
    grid = make_grids(test_split.images, torch.arange(4).view(1, 4))
    maps = adapter.explain_native(adapter.encode(grid).expand(4, -1, -1, -1), test_split.labels[:4])
    assert maps.shape == (4, 2, 56, 56) and torch.isfinite(maps).all()
