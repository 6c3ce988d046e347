"""GridPG: known answers, protocol presets, grid building, selection and ViT window geometry."""

import math

import pytest
import torch

from faithbench.metrics import (
    GRIDPG_PRESETS,
    cell_masses,
    get_preset,
    grid_pointing_game,
    gridpg_maps,
    make_grids,
    select_by_confidence,
    select_grids,
    select_random_partners,
    sliding_window_maps,
    smooth_maps,
)


def cell_block(n: int, cell: int, k: int, tiling: str, value: float = 1.0) -> torch.Tensor:
    """An (n*cell)^2 map with ``value`` on cell k only."""
    m = torch.zeros(n * cell, n * cell)
    r, c = (k % n, k // n) if tiling == "column-major" else (k // n, k % n)
    m[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell] = value
    return m


# ----------------------------------------------------------------------------- known answers


@pytest.mark.parametrize("tiling", ["column-major", "row-major"])
@pytest.mark.parametrize("n", [2, 3])
def test_map_concentrated_in_its_cell_scores_one(n, tiling):
    maps = torch.stack([cell_block(n, 4, k, tiling) for k in range(n * n)]).unsqueeze(0)
    s = grid_pointing_game(maps, n, tiling=tiling)
    assert torch.equal(s.values, torch.ones(1, n * n))
    assert not s.undefined.any()


@pytest.mark.parametrize("n", [2, 3])
def test_uniform_map_scores_one_over_n_squared(n):
    s = grid_pointing_game(torch.full((2, n * n, 3 * n, 3 * n), 0.7), n)
    torch.testing.assert_close(s.values, torch.full((2, n * n), 1 / n**2))


def test_map_in_the_wrong_cell_scores_zero_and_split_mass_scores_its_share():
    wrong = cell_block(2, 2, 3, "column-major")
    split = cell_block(2, 2, 0, "column-major", 3.0) + cell_block(2, 2, 1, "column-major", 1.0)
    s = grid_pointing_game(torch.stack([wrong, split]).unsqueeze(0), 2, cells=torch.tensor([[0, 0]]))
    torch.testing.assert_close(s.values, torch.tensor([[0.0, 0.75]]))


def test_negative_attribution_is_ignored():
    m = cell_block(2, 2, 0, "row-major", 2.0) - cell_block(2, 2, 1, "row-major", 5.0)
    s = grid_pointing_game(m.view(1, 1, 4, 4), 2, cells=torch.tensor([[0]]), tiling="row-major")
    assert s.values.item() == 1.0


def test_channels_are_summed_before_the_positive_part():
    # Channel 0 puts +1 in cell 0 and cell 1; channel 1 puts -1 in cell 1: only cell 0 stays positive.
    c0 = cell_block(2, 2, 0, "column-major") + cell_block(2, 2, 1, "column-major")
    c1 = -cell_block(2, 2, 1, "column-major")
    s = grid_pointing_game(torch.stack([c0, c1]).view(1, 1, 2, 4, 4), 2, cells=torch.tensor([[0]]))
    assert s.values.item() == 1.0


def test_tiling_orders_place_cell_one_differently():
    # Mass at row 1, column 0: that is cell 1 in column-major order and cell 2 in row-major order.
    m = torch.zeros(4, 4)
    m[2:, :2] = 1
    maps = m.expand(1, 4, 4, 4)
    assert grid_pointing_game(maps, 2, tiling="column-major").values[0].tolist() == [0, 1, 0, 0]
    assert grid_pointing_game(maps, 2, tiling="row-major").values[0].tolist() == [0, 0, 1, 0]


def test_smoothing_spreads_a_border_impulse_by_hand():
    # Impulse at the bottom-right pixel of cell 0 (cells 4x4); a 3x3 mean keeps 4 of its 9 pixels in cell 0.
    m = torch.zeros(1, 1, 8, 8)
    m[0, 0, 3, 3] = 1.0
    s = grid_pointing_game(m, 2, cells=torch.tensor([[0]]), smooth=3)
    torch.testing.assert_close(s.values, torch.tensor([[4 / 9]]))
    interior = torch.zeros(1, 1, 8, 8)
    interior[0, 0, 1, 1] = 1.0
    assert grid_pointing_game(interior, 2, cells=torch.tensor([[0]]), smooth=3).values.item() == pytest.approx(1.0)


def test_smooth_maps_is_zero_padded_mean_and_keeps_size():
    m = torch.ones(1, 5, 5)
    out = smooth_maps(m, 3)
    assert out.shape == m.shape
    assert out[0, 2, 2] == pytest.approx(1.0)
    assert out[0, 0, 0] == pytest.approx(4 / 9)
    assert torch.equal(smooth_maps(m, 1), m)
    with pytest.raises(ValueError, match="odd"):
        smooth_maps(m, 4)


def test_smoothing_happens_before_the_positive_part():
    # Row 0 holds +1 (cell 0), -3 and +3 (both in cell 2, column-major). By hand, the 3x3 mean of the
    # signed map is positive only in column 0 -> score 1. Without smoothing the score is 1/4, and
    # clamping before smoothing would also give 1/4.
    m = torch.zeros(1, 1, 4, 4)
    m[0, 0, 0, 0], m[0, 0, 0, 2], m[0, 0, 0, 3] = 1.0, -3.0, 3.0
    cells = torch.tensor([[0]])
    assert grid_pointing_game(m, 2, cells=cells, smooth=1).values.item() == pytest.approx(0.25)
    assert grid_pointing_game(m, 2, cells=cells, smooth=3).values.item() == pytest.approx(1.0)


# ----------------------------------------------------------------------------- zero mass


def test_zero_mass_rules_are_flagged_and_applied():
    maps = torch.ones(2, 4, 4, 4)
    maps[0, 2] = -1.0  # grid 0, map 2 has no positive mass
    zero = grid_pointing_game(maps, 2, zero_mass="zero")
    assert zero.undefined.tolist() == [[False, False, True, False], [False] * 4]
    assert zero.values[0, 2] == 0 and zero.values[0, 0] == 0.25
    assert zero.n_undefined == 1
    drop = grid_pointing_game(maps, 2, zero_mass="drop-grid")
    assert torch.isnan(drop.values[0]).all() and not torch.isnan(drop.values[1]).any()
    nan = grid_pointing_game(maps, 2, zero_mass="nan")
    assert torch.isnan(nan.values).sum() == 1 and torch.isnan(nan.values[0, 2])


# ----------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="NaN/inf"):
        grid_pointing_game(torch.full((1, 4, 4, 4), float("nan")), 2)
    with pytest.raises(ValueError, match="not divisible"):
        grid_pointing_game(torch.ones(1, 4, 5, 4), 2)
    with pytest.raises(ValueError, match="one map per cell"):
        grid_pointing_game(torch.ones(1, 3, 4, 4), 2)
    with pytest.raises(ValueError, match="zero_mass"):
        grid_pointing_game(torch.ones(1, 4, 4, 4), 2, zero_mass="skip")
    with pytest.raises(ValueError, match="tiling"):
        grid_pointing_game(torch.ones(1, 4, 4, 4), 2, tiling="diagonal")
    with pytest.raises(ValueError, match="cells must index"):
        grid_pointing_game(torch.ones(1, 1, 4, 4), 2, cells=torch.tensor([[4]]))
    with pytest.raises(TypeError, match="floating"):
        grid_pointing_game(torch.ones(1, 4, 4, 4, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="shape"):
        grid_pointing_game(torch.ones(4, 4, 4), 2)
    with pytest.raises(ValueError, match="unknown GridPG preset 'tpami'.*bcos-v2"):
        get_preset("tpami")


# ----------------------------------------------------------------------------- grid building


@pytest.mark.parametrize("tiling", ["column-major", "row-major"])
def test_make_grids_places_image_k_where_cell_masses_reads_cell_k(tiling):
    images = torch.arange(1, 10, dtype=torch.float).view(9, 1, 1, 1).expand(9, 2, 3, 3)
    idx = torch.tensor([[4, 0, 8, 1, 2, 3, 5, 6, 7]])
    grid = make_grids(images, idx, tiling=tiling)
    assert grid.shape == (1, 2, 9, 9)
    per_cell = cell_masses(grid[:, 0], 3, tiling=tiling) / 9
    assert per_cell[0].tolist() == (idx[0] + 1).float().tolist()


def test_column_major_layout_by_hand():
    images = torch.arange(4, dtype=torch.float).view(4, 1, 1, 1)
    grid = make_grids(images, torch.arange(4).view(1, 4), tiling="column-major")
    assert grid[0, 0].tolist() == [[0.0, 2.0], [1.0, 3.0]]
    grid = make_grids(images, torch.arange(4).view(1, 4), tiling="row-major")
    assert grid[0, 0].tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_make_grids_rejects_non_square_cell_counts():
    with pytest.raises(ValueError, match="square"):
        make_grids(torch.ones(5, 1, 2, 2), torch.zeros(1, 5, dtype=torch.long))


# ----------------------------------------------------------------------------- selection


def confident_logits(labels: torch.Tensor, classes: int, seed: int = 0, margin: float = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(labels.shape[0], classes, generator=g)
    logits[torch.arange(labels.shape[0]), labels] += margin + 4 * torch.rand(labels.shape[0], generator=g)
    return logits


def test_select_by_confidence_follows_the_bcos_v2_rules():
    labels = torch.arange(12).repeat(6)
    logits = confident_logits(labels, 12)
    logits[0] = -logits[0]  # misclassified
    sel = select_by_confidence(labels, logits, grid_size=3, n_grids=None)
    idx = sel.indices
    assert idx.shape[1] == 9 and idx.shape[0] >= 5
    assert len(set(idx.flatten().tolist())) == idx.numel(), "an image was reused"
    chosen_labels = labels[idx]
    assert all(len(set(row.tolist())) == 9 for row in chosen_labels), "classes not distinct in a grid"
    conf = logits.max(dim=1).values
    assert (logits[idx.flatten()].argmax(1) == labels[idx.flatten()]).all()
    assert (conf[idx.flatten()].sigmoid() > 0.5).all()
    assert 0 not in idx.flatten().tolist()
    # Per class, images are used most confident first.
    for k in range(12):
        used = [i for i in idx.flatten().tolist() if labels[i] == k]
        assert conf[used].tolist() == sorted(conf[used].tolist(), reverse=True)


def test_select_by_confidence_is_seeded_and_respects_n_grids():
    labels = torch.arange(10).repeat(8)
    logits = confident_logits(labels, 10)
    a = select_by_confidence(labels, logits, grid_size=2, n_grids=5, seed=42).indices
    b = select_by_confidence(labels, logits, grid_size=2, n_grids=5, seed=42).indices
    c = select_by_confidence(labels, logits, grid_size=2, n_grids=5, seed=7).indices
    assert a.shape == (5, 4) and torch.equal(a, b) and not torch.equal(a, c)


def test_select_by_confidence_threshold_is_sigmoid_of_the_max_logit():
    labels = torch.tensor([0, 1, 2, 3])
    logits = torch.full((4, 4), -5.0)
    logits[torch.arange(4), labels] = torch.tensor([0.1, 0.2, 0.3, -0.1])  # the last: sigmoid < 0.5
    assert select_by_confidence(labels, logits, grid_size=2, n_grids=None).indices.shape[0] == 0
    logits[3, 3] = 0.05
    assert select_by_confidence(labels, logits, grid_size=2, n_grids=None).indices.shape[0] == 1


def test_select_random_partners_drops_and_counts_grids_with_an_ineligible_cell():
    labels = torch.arange(8).repeat(5)
    eligible = torch.ones(40, dtype=torch.bool)
    eligible[labels == 3] = False
    sel = select_random_partners(labels, eligible, grid_size=2, n_grids=None, seed=1)
    assert sel.n_candidates == 40 and sel.n_dropped == 40 - sel.indices.shape[0] > 0
    assert not (labels[sel.indices] == 3).any()
    assert all(len(set(row.tolist())) == 4 for row in labels[sel.indices])
    again = select_random_partners(labels, eligible, grid_size=2, n_grids=None, seed=1)
    assert torch.equal(sel.indices, again.indices)
    with pytest.raises(ValueError, match="distinct classes"):
        select_random_partners(torch.tensor([0, 0, 1]), torch.ones(3, dtype=torch.bool), grid_size=2, n_grids=1)


def test_select_grids_applies_the_preset():
    labels = torch.arange(10).repeat(10)
    logits = confident_logits(labels, 10, margin=5)
    bcos = select_grids(get_preset("bcos-v2"), labels, logits, is_vit=False, n_grids=3)
    assert bcos.indices.shape == (3, 9)
    vit = select_grids(get_preset("bcos-v2"), labels, logits, is_vit=True, n_grids=3)
    assert vit.indices.shape == (3, 4)
    aloe = select_grids(get_preset("aloe"), labels, logits, is_vit=False, n_grids=4)
    assert aloe.indices.shape == (4, 4)
    p = logits.softmax(1)[torch.arange(100), labels]
    assert (p[aloe.indices] > 0.95).all()
    assert aloe.n_dropped == aloe.n_candidates - 4 > 0  # some candidates had a cell below 0.95


def test_presets_match_the_protocol_table():
    v2, bf, aloe = (GRIDPG_PRESETS[k] for k in ("bcos-v2", "bcosification", "aloe"))
    assert (v2.tiling, v2.selection, v2.zero_mass, v2.vit_windows) == (
        "column-major",
        "confidence",
        "zero",
        "sum-padded",  # TPAMI Sec. 4 evaluates ViTs with sliding windows
    )
    assert (bf.tiling, bf.vit_windows) == ("column-major", "sum-padded")
    assert (aloe.tiling, aloe.selection, aloe.zero_mass, aloe.vit_windows, aloe.threshold) == (
        "row-major",
        "random-partners",
        "drop-grid",
        "mean-unpadded",
        0.95,
    )
    # TPAMI Sec. 4: 15 x 15 at 224 px, 3 x 3 at 32 px; linear in between, nearest odd size.
    assert [v2.smoothing_kernel(s) for s in (224, 112, 64, 32, 28, 8)] == [15, 9, 5, 3, 3, 1]
    assert aloe.smoothing_kernel(224) == 1
    assert (v2.grid_size(False), v2.grid_size(True), aloe.grid_size(False)) == (3, 2, 2)


# ----------------------------------------------------------------------------- ViT geometry


def channel_sum(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)


def test_mean_fold_without_padding_reproduces_a_local_map_and_counts_coverage():
    # ALOE geometry at 1/16 scale: 28 px grid, 14 px windows, stride 7 -> 3x3 windows.
    grids = torch.rand(2, 3, 28, 28)
    targets = torch.zeros(2, 4, dtype=torch.long)
    mean = sliding_window_maps(channel_sum, grids, targets, window=14, stride=7, padding=0, fold="mean")
    torch.testing.assert_close(mean, grids.sum(1, keepdim=True).expand(2, 4, 28, 28))
    ones = sliding_window_maps(
        lambda x, t: torch.ones_like(x[:, 0]), grids, targets, window=14, stride=7, padding=0, fold="sum"
    )
    assert ones[0, 0, 0, 0] == 1 and ones[0, 0, 10, 10] == 4 and ones[0, 0, 3, 10] == 2


def test_sum_fold_with_padding_covers_every_pixel_four_times():
    # B-cosification geometry: window = cell, stride = padding = half a cell -> 25 windows on a 2x2 grid.
    grids = torch.rand(1, 6, 16, 16)
    calls = []

    def explain(x, t):
        calls.append(x.shape[0])
        return x.sum(1)

    out = sliding_window_maps(
        explain,
        grids,
        torch.zeros(1, 4, dtype=torch.long),
        window=8,
        stride=4,
        padding=4,
        fold="sum",
        chunk_size=1000,
    )
    assert sum(calls) == 25 * 4
    torch.testing.assert_close(out[0, 0], 4 * grids[0].sum(0))


def test_windows_receive_the_right_targets_and_pixels():
    grids = torch.arange(16, dtype=torch.float).view(1, 1, 4, 4)
    seen = []

    def explain(x, t):
        seen.append((x.clone(), t.clone()))
        return torch.zeros(x.shape[0], 2, 2)

    sliding_window_maps(explain, grids, torch.tensor([[5, 9]]), window=2, stride=2, padding=0, fold="sum", chunk_size=3)
    xs = torch.cat([s[0] for s in seen])
    ts = torch.cat([s[1] for s in seen])
    assert ts.tolist() == [5, 9, 5, 9, 5, 9, 5, 9]  # a window's targets together (shared model calls)
    assert xs[2, 0].tolist() == xs[3, 0].tolist() == [[2.0, 3.0], [6.0, 7.0]]


def test_sliding_windows_reject_geometry_that_does_not_tile():
    with pytest.raises(ValueError, match="do not tile"):
        sliding_window_maps(
            channel_sum,
            torch.ones(1, 1, 10, 10),
            torch.zeros(1, 1, dtype=torch.long),
            window=4,
            stride=4,
            padding=0,
            fold="mean",
        )


def test_gridpg_maps_explains_each_cell_class_and_uses_the_preset_geometry():
    # A model-free "explainer" that lights up the cell whose image has intensity == target.
    images = torch.stack([torch.full((1, 4, 4), float(k)) for k in range(4)])
    grids = make_grids(images, torch.tensor([[2, 0, 3, 1]]), tiling="row-major")
    labels = torch.tensor([[2, 0, 3, 1]])

    def explain(x, t):
        return (x[:, 0] == t.view(-1, 1, 1).float()).float()

    maps = gridpg_maps(explain, grids, labels, get_preset("bcos-v2"), is_vit=False)
    assert maps.shape == (1, 4, 8, 8)
    assert grid_pointing_game(maps, 2, tiling="row-major").values.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    vit = gridpg_maps(explain, grids, labels, get_preset("aloe"), is_vit=True)
    assert grid_pointing_game(vit, 2, tiling="row-major").values.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    summed = gridpg_maps(explain, grids, labels, get_preset("bcosification"), is_vit=True)
    torch.testing.assert_close(summed, 4 * maps)


def test_zero_padded_smoothing_favours_centre_cells_of_a_uniform_map():
    s = grid_pointing_game(torch.ones(1, 9, 672, 672), 3, smooth=15)
    # Smoothing with zero padding lowers border cells; centre cell gets the most mass.
    assert s.values[0, 4] > 1 / 9 > s.values[0, 0]
    assert math.isclose(float(s.values.sum()), 1.0, rel_tol=1e-5)


def test_separable_smoothing_equals_the_two_dimensional_mean():
    m = torch.randn(3, 20, 20)
    direct = torch.nn.functional.avg_pool2d(m.unsqueeze(1), 7, stride=1, padding=3).squeeze(1)
    torch.testing.assert_close(smooth_maps(m, 7), direct)
