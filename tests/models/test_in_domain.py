"""The single-deletion score's in-domain variants (IDSDS): the training-time cell deletion and the recipe factory."""

import torch
from torch import nn

from faithbench.metrics.single_deletion import cell_index
from faithbench.models.data.splits import image_splits
from faithbench.models.zoo import recipe_hash, training
from faithbench.models.zoo.entries import RECIPES
from faithbench.models.zoo.recipes import STANDARD, Recipe, in_domain, no_training
from faithbench.models.zoo.training import accuracy, random_cell_deletion


def test_one_cell_of_the_metric_grid_takes_the_fill_in_the_deleted_share():
    images = torch.rand(400, 3, 28, 28) + 1  # no pixel equals the fill
    fill = torch.tensor([-1.0, -2.0, -3.0])
    out = random_cell_deletion(images, 4, 0.5, fill, torch.Generator().manual_seed(0))
    changed = (out != images).any(1)  # (N, H, W)
    deleted = changed.flatten(1).any(1)
    assert 150 < deleted.sum() < 250  # about half the images
    cells = cell_index(28, 28, 4)
    for n in deleted.nonzero().flatten().tolist():
        (cell,) = cells[changed[n]].unique().tolist()  # one cell, and all of it
        assert changed[n].sum() == 49 and (cells == cell).sum() == 49
        assert torch.equal(out[n][:, changed[n]], fill.view(3, 1).expand(3, 49))
    assert torch.equal(out[~deleted], images[~deleted])
    again = random_cell_deletion(images, 4, 0.5, fill, torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    assert torch.equal(random_cell_deletion(images, 4, 0.0, fill, torch.Generator()), images)


def test_uneven_cells_follow_the_metric():
    out = random_cell_deletion(torch.ones(64, 1, 10, 10), 3, 1.0, torch.zeros(1), torch.Generator().manual_seed(1))
    cells = cell_index(10, 10, 3)
    sizes = set()
    for image in out[:, 0]:
        (cell,) = cells[image == 0].unique().tolist()  # one whole cell of the metric's uneven grid (4, 3, 3 px)
        assert (image == 0).sum() == (cells == cell).sum()
        sizes.add(int((image == 0).sum()))
    assert sizes == {16, 12, 9}


def test_the_variants_keep_their_parents_family_and_domain():
    for name in ("cnn_mnist", "bcos_cnn_mnist", "bcosified_cnn_mnist"):
        parent, variant = RECIPES.get(name), RECIPES.get(f"{name}_idsds")
        assert variant.depends == (name,) and variant.family == parent.family
        assert (variant.encoding, variant.activation, variant.logit_bias) == (
            parent.encoding,
            parent.activation,
            parent.logit_bias,
        )
        assert variant.params["delete_grid"] == 4 and variant.params["delete_share"] == 0.5
        assert recipe_hash(variant.name) != recipe_hash(name)
    assert RECIPES.get("bcos_cnn_mnist_idsds").params["target_encoding"] == "uniform"


def test_the_fine_tune_starts_from_the_parent(monkeypatch):
    """A linear parent: the variant's training loads its weights, then moves them on cell-deleted digits."""
    torch.manual_seed(0)
    parent = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    toy = Recipe(
        name="toy_linear",
        family="standard",
        description="toy",
        encoding=STANDARD,
        architecture=lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)),
        train=no_training,
    )
    variant = in_domain(toy, epochs=1, lr=1e-3)
    seen = []
    real = training.random_cell_deletion
    monkeypatch.setattr(training, "random_cell_deletion", lambda *a: seen.append(a[1:4]) or real(*a))
    model = variant.architecture()
    log = variant.train(model, {"toy_linear": parent}, variant.params)
    assert seen and all(grid == 4 and share == 0.5 for grid, share, _ in seen)
    assert log["accuracy_before_finetuning"] == accuracy(parent, STANDARD, image_splits("mnist")[1])
    moved = (model[1].weight - parent[1].weight).abs().max()
    assert 0 < moved < 1
