"""The zoo's locality check on hand-built models with known answers."""

import pytest
import torch

from faithbench.models.zoo.locality import (
    blanked_grids,
    cell_checks,
    distinct_class_grids,
    locality,
    tile,
    windowed_logits,
)

SIDE = 4  # px of one "digit"
VALUES = torch.arange(1, 11) / 10  # class k is a constant patch of value (k + 1) / 10; background is 0


def patches(per_class: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.arange(10).repeat_interleave(per_class)
    return VALUES[labels].view(-1, 1, 1, 1).expand(-1, 1, SIDE, SIDE).clone(), labels


def evidence(x: torch.Tensor) -> torch.Tensor:
    """(n, 10, H, W): 1 where a pixel has class k's value."""
    return (x - VALUES.view(1, -1, 1, 1)).abs().lt(1e-3).float()


def local_model(x: torch.Tensor) -> torch.Tensor:
    """Class k's logit = its pixel count - 0.5 + 0.01 k: every present class is positive; on an empty
    image class 9 wins."""
    return evidence(x).sum(dim=(2, 3)) - 0.5 + 0.01 * torch.arange(10)


def top_left_model(x: torch.Tensor) -> torch.Tensor:
    """As ``local_model`` but it reads only the top-left cell."""
    return local_model(x[..., :SIDE, :SIDE])


def grids_of_classes_0_to_8(n_grids: int = 3) -> torch.Tensor:
    """Indices into ``patches()`` (2 per class): every grid holds classes 0..8 in a random order."""
    gen = torch.Generator().manual_seed(0)
    return torch.stack([2 * torch.randperm(9, generator=gen) + g % 2 for g in range(n_grids)])


def test_tile_is_row_major_and_blanking_keeps_one_cell():
    images = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 1, 2, 2) + 1
    idx = torch.tensor([[0, 1, 2, 3]])
    grid = tile(images, idx)
    assert grid.shape == (1, 1, 4, 4)
    assert grid[0, 0, ::2, ::2].tolist() == [[1, 2], [3, 4]]  # cell k at row k div 2, column k mod 2
    blanked = blanked_grids(images, idx)
    assert blanked.shape == (4, 1, 4, 4)
    for k in range(4):
        r, c = divmod(k, 2)
        assert blanked[k, 0, 2 * r, 2 * c] == k + 1 and blanked[k].count_nonzero() == 4


def test_distinct_class_grids_draw_eligible_images_of_distinct_classes():
    labels = torch.arange(10).repeat(5)
    eligible = torch.rand(50, generator=torch.Generator().manual_seed(1)) > 0.3
    idx = distinct_class_grids(labels, eligible, grid_size=3, n_grids=20, seed=4)
    assert idx.shape == (20, 9) and eligible[idx].all()
    assert all(len(set(row)) == 9 for row in labels[idx].tolist())
    assert torch.equal(idx, distinct_class_grids(labels, eligible, grid_size=3, n_grids=20, seed=4))
    with pytest.raises(ValueError, match="needs 9 classes"):
        distinct_class_grids(labels, labels < 5, grid_size=3, n_grids=1)


def test_a_local_model_passes_and_a_model_reading_one_position_fails():
    images, labels = patches()
    idx = grids_of_classes_0_to_8()
    positive, wins = cell_checks(local_model, images, labels, idx)
    assert positive.all() and wins.all()
    positive, wins = cell_checks(top_left_model, images, labels, idx)
    expected = torch.zeros_like(positive)
    expected[:, 0] = True  # only the top-left cell is seen: positive there; elsewhere nothing is added (a tie)
    assert torch.equal(positive, expected) and torch.equal(wins, expected)


def test_the_logit_bias_is_subtracted_before_the_sign_test():
    images, labels = patches()
    positive, _ = cell_checks(local_model, images, labels, grids_of_classes_0_to_8(), logit_bias=SIDE * SIDE)
    assert not positive.any()  # count - 0.5 + 0.01 k - 16 < 0


def test_fixed_size_models_see_windows_of_one_cell_at_half_a_cell_stride():
    images, labels = patches()
    seen = []

    def fixed(x):
        seen.append(tuple(x.shape[-2:]))
        return local_model(x)

    idx = torch.tensor([[0, 2, 4, 6]])  # classes 0..3 on a 2x2 grid of 8 px
    mean = windowed_logits(fixed, tile(images, idx), window=SIDE)
    # padded to 12 px: 5 x 5 windows; each of a cell's 16 pixels lies in 4 windows -> 64 / 25 on average
    assert set(seen) == {(SIDE, SIDE)}
    assert mean[0, :4] - (-0.5 + 0.01 * torch.arange(4)) == pytest.approx(torch.full((4,), 64 / 25))
    positive, wins = cell_checks(fixed, images, labels, idx, window=SIDE)
    assert positive.all() and wins.all()


def test_locality_summarises_the_fractions():
    images, labels = patches()
    report = locality(local_model, images, labels, grid_size=3, n_grids=7)
    assert (report.positive, report.wins, report.n_cells, report.grid_size) == (1.0, 1.0, 63, 3)
    report = locality(top_left_model, images, labels, grid_size=3, n_grids=40, seed=2)
    assert report.positive == pytest.approx(1 / 9) and report.wins == pytest.approx(1 / 9)


def test_a_model_right_on_too_few_classes_is_not_checked():
    images, labels = patches()
    report = locality(lambda x: local_model(x) * (torch.arange(10) < 5), images, labels, grid_size=3)
    assert report.n_cells == 0 and report.positive != report.positive and report.wins != report.wins


def test_wins_discounts_what_the_background_alone_votes_for():
    """A GAP-like model whose black background votes for class 9 and whose cells add a little evidence:
    the raw argmax of a lone cell is always 9, yet every cell adds evidence for its own class."""
    images, labels = patches()

    def background_biased(x):
        black = (x == 0).float().mean(dim=(1, 2, 3))
        return 0.01 * evidence(x).sum(dim=(2, 3)) + 10 * black.unsqueeze(1) * (torch.arange(10) == 9)

    positive, wins = cell_checks(background_biased, images, labels, grids_of_classes_0_to_8())
    assert wins.all() and positive.all()
