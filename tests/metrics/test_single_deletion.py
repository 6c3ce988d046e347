"""The single-deletion score (SDS, Hesse et al. 2024): hand-computed cases, the authors' procedure (a cell sliced out
at a time, one model call per cell, scipy's Spearman) on random cases, and properties."""

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from faithbench.metrics._perturb import rank_keys
from faithbench.metrics.single_deletion import SingleDeletionConfig, cell_drops, cell_index, single_deletion
from faithbench.metrics.truth_agreement import cell_sums


def _linear(w: torch.Tensor):
    """A model whose logit 0 is sum(w * x) and logit 1 its negative: a cell's drop is its share of the sum."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        z = (x * w).flatten(1).sum(1, keepdim=True)
        return torch.cat([z, -z], dim=1)

    return forward


def test_a_hand_computed_case_with_tied_cells():
    # 2 x 2 cells of one pixel each; the map ties two cells: ranks (1.5, 1.5, 3, 4) against (1, 2, 3, 4)
    maps = torch.tensor([[[1.0, 1.0], [2.0, 3.0]]])
    drops = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    rho = single_deletion(maps, drops, grid=2).values
    assert rho.item() == pytest.approx(4.5 / (4.5 * 5) ** 0.5, abs=1e-6)  # 0.948683


def test_the_drops_of_a_linear_model_are_its_cells_shares_and_input_x_weight_scores_one():
    torch.manual_seed(0)
    w, x = torch.randn(1, 1, 8, 8), torch.rand(3, 1, 8, 8)
    targets = torch.zeros(3, dtype=torch.long)
    drops = cell_drops(_linear(w), x, targets, grid=4, baseline=0.0, chunk_size=5)
    expected = (x * w)[:, 0].reshape(3, 4, 2, 4, 2).sum(dim=(2, 4)).reshape(3, 16)  # 2 x 2 px cells, row-major
    torch.testing.assert_close(drops, expected, atol=1e-5, rtol=1e-5)
    contributions = (x * w)[:, 0]
    assert single_deletion(contributions, drops, grid=4).values.tolist() == pytest.approx([1.0] * 3)
    assert single_deletion(-contributions, drops, grid=4).values.tolist() == pytest.approx([-1.0] * 3)
    targets_1 = torch.ones(3, dtype=torch.long)  # the other logit: every drop negated
    torch.testing.assert_close(cell_drops(_linear(w), x, targets_1, grid=4), -drops)


def _authors(forward, images, maps, targets, grid, baseline):
    """The authors' procedure (visinf/idsds single_deletion.py), written out: equal cells sliced one at a time, one
    model call each, the drops against the map's cell sums by scipy's Spearman."""
    _, _, h, w = images.shape
    ch, cw = h // grid, w // grid
    original = forward(images).gather(1, targets.view(-1, 1)).squeeze(1)
    sums, drops = [], []
    for r in range(grid):
        for c in range(grid):
            cut, rows, cols = images.clone(), slice(r * ch, (r + 1) * ch), slice(c * cw, (c + 1) * cw)
            cut[:, :, rows, cols] = baseline[:, :, rows, cols]
            drops.append((original - forward(cut).gather(1, targets.view(-1, 1)).squeeze(1)).numpy())
            sums.append(maps[:, rows, cols].sum(dim=(1, 2)).numpy())
    sums, drops = np.stack(sums, 1), np.stack(drops, 1)
    return np.array([stats.spearmanr(sums[i], drops[i]).statistic for i in range(len(images))])


@pytest.mark.parametrize("grid", [2, 4, 7])
def test_agrees_with_the_authors_procedure_on_a_small_network(grid):
    torch.manual_seed(grid)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 28 * 28, 10)).eval()  # fmt: skip
    x, maps = torch.rand(6, 1, 28, 28), torch.randn(6, 28, 28)
    targets = torch.randint(0, 10, (6,))
    baseline = torch.full_like(x, 0.3)
    with torch.no_grad():
        expected = _authors(net, x, maps, targets, grid, baseline)
    drops = cell_drops(net, x, targets, grid=grid, baseline=baseline, chunk_size=16)
    got = single_deletion(maps, drops, grid=grid).values.numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_cells_cover_an_image_whose_side_the_grid_does_not_divide():
    cells = cell_index(30, 29, 4)
    counts = torch.bincount(cells.flatten(), minlength=16)
    assert counts.sum() == 30 * 29 and counts.min() >= 7 * 7 and counts.max() <= 8 * 8
    assert cells[0, 0] == 0 and cells[-1, -1] == 15 and cells[0, -1] == 3


def test_a_uniform_map_and_a_blind_model_are_undefined():
    drops = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.0, 0.0]])
    maps = torch.stack([torch.ones(4, 4), torch.randn(4, 4)])
    scores = single_deletion(maps, drops, grid=2)
    assert scores.undefined.tolist() == [True, True] and scores.values.isnan().all()


def test_bad_settings_and_shapes_are_refused():
    with pytest.raises(ValueError, match="grid must be at least 2"):
        SingleDeletionConfig(grid=1)
    with pytest.raises(ValueError, match="grid must be between 1 and the image side"):
        cell_index(8, 8, 9)
    with pytest.raises(ValueError, match=r"drops must be \(B, grid\^2\)"):
        single_deletion(torch.randn(2, 8, 8), torch.randn(2, 9), grid=4)
    with pytest.raises(ValueError, match="NaN"):
        single_deletion(torch.full((1, 8, 8), float("nan")), torch.randn(1, 16), grid=4)


def test_cell_sums_equal_but_for_rounding_tie_as_exactly_equal_ones_do():
    # cells 0 and 1 are equal in exact arithmetic; the kernels that summed them left 1e-7 of rounding in one (as a
    # GradCAM map's upsampled blocks on another CPU): ranked at 16 bits they tie, as the exact tie does
    drops = torch.tensor([[0.2, 0.1, 0.3, 0.4]])
    exact = torch.tensor([[[0.5, 0.5], [2.0, 3.0]]])
    rounded = torch.tensor([[[0.5, 0.5 * (1 + 1e-7)], [2.0, 3.0]]])
    flipped = torch.tensor([[[0.5 * (1 + 1e-7), 0.5], [2.0, 3.0]]])
    tie = single_deletion(exact, drops, grid=2).values
    assert tie.item() == pytest.approx(4.5 / (4.5 * 5) ** 0.5, abs=1e-6)  # ranks (1.5, 1.5, 3, 4) vs (2, 1, 3, 4)
    assert single_deletion(rounded, drops, grid=2).values.item() == tie.item()
    assert single_deletion(flipped, drops, grid=2).values.item() == tie.item()


maps = st.integers(0, 2**31 - 1).map(lambda s: torch.randn(3, 12, 12, generator=torch.Generator().manual_seed(s)))
drops = st.integers(0, 2**31 - 1).map(lambda s: torch.randn(3, 9, generator=torch.Generator().manual_seed(s)))


@settings(max_examples=40, deadline=None)
@given(a=maps, d=drops, scale=st.floats(0.01, 100), shift=st.floats(-10, 10))
def test_bounded_and_blind_to_scale_and_to_a_shift_of_equal_cells(a, d, scale, shift):
    rho = single_deletion(a, d, grid=3).values
    assert ((rho >= -1) & (rho <= 1)).all()
    # 3 x 3 cells of 16 px each: a constant shift moves every cell sum alike, a positive scale keeps their order, as
    # long as the moved sums still differ at the 16 significant bits they are ranked at (a large shift of a small
    # scale brings two sums within 2^-16 of their size: they tie, by design)
    for sums in (cell_sums(a, cell_index(12, 12, 3)), cell_sums(a * scale + shift, cell_index(12, 12, 3))):
        assume(all(len(row.unique()) == 9 for row in rank_keys(sums)))
    torch.testing.assert_close(single_deletion(a * scale + shift, d, grid=3).values, rho, atol=1e-5, rtol=0)
    torch.testing.assert_close(single_deletion(-a, d, grid=3).values, -rho, atol=1e-6, rtol=0)


@settings(max_examples=10, deadline=None)
@given(chunk=st.integers(1, 40))
def test_the_drops_do_not_depend_on_the_chunk_size(chunk):
    torch.manual_seed(1)
    w, x = torch.randn(1, 1, 8, 8), torch.rand(3, 1, 8, 8)
    t = torch.zeros(3, dtype=torch.long)
    torch.testing.assert_close(cell_drops(_linear(w), x, t, grid=4, chunk_size=chunk), cell_drops(_linear(w), x, t))
