"""GridPG, the grid pointing game (B-cos TPAMI Sec. 4 / App. C.2.1, B-cosification, ALOE App. A).

An N x N grid image tiles N^2 images of distinct classes. For each cell i the logit of cell i's
class is explained on the whole grid; the score of cell i is the share of positive attribution
that falls inside cell i:

    L_i = sum_{p in cell i} A+(p) / sum_p A+(p),    A+ = max(smooth_k(sum_c A_c), 0)

A uniform map scores 1/N^2, a map concentrated in the right cell scores 1. The three reference
implementations differ (tiling order, image selection, smoothing, zero-mass handling, ViT
windows); each is a named :class:`GridPGPreset`. Everything here is batched over grids and cells.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from metrics._selection import draw_distinct_classes
from metrics._share import target_share
from metrics.types import Scores

TILINGS = ("column-major", "row-major")
ZERO_MASS_RULES = ("zero", "drop-grid", "nan")
SELECTIONS = ("confidence", "random-partners")
VIT_WINDOWS = ("none", "sum-padded", "mean-unpadded")

ExplainFn = Callable[[Tensor, Tensor], Tensor]
"""``explain(inputs (n, C, H, W), targets (n,)) -> maps (n, H, W) or (n, C, H, W)``."""


# --------------------------------------------------------------------------- grid construction


def make_grids(images: Tensor, indices: Tensor, *, tiling: str = "column-major") -> Tensor:
    """Tile ``images`` (M, C, h, w) into grids following ``indices`` (G, N^2) -> (G, C, N h, N w).

    Cell k is image ``indices[g, k]``; it sits at row ``k mod N``, column ``k div N`` for
    ``column-major`` tiling (B-cos v2) and at row ``k div N``, column ``k mod N`` for ``row-major``
    (ALOE).
    """
    check_tensor(images, "images", min_dim=4)
    check_tensor(indices, "indices", min_dim=2)
    check_choice(tiling, "tiling", TILINGS)
    n = _grid_side(indices.shape[1], "indices.shape[1]")
    g, (_, c, h, w) = indices.shape[0], images.shape
    cells = images[indices.long()]  # (G, N^2, C, h, w)
    if tiling == "row-major":  # cells[g, r*N + c]
        return cells.reshape(g, n, n, c, h, w).permute(0, 3, 1, 4, 2, 5).reshape(g, c, n * h, n * w)
    # column-major: cells[g, c*N + r]
    return cells.reshape(g, n, n, c, h, w).permute(0, 3, 2, 4, 1, 5).reshape(g, c, n * h, n * w)


def cell_masses(maps: Tensor, grid_size: int, *, tiling: str = "column-major") -> Tensor:
    """Sum of ``maps`` (B, H, W) inside each grid cell -> (B, N^2), in the cell order of ``tiling``."""
    check_choice(tiling, "tiling", TILINGS)
    b, h, w = maps.shape
    n = grid_size
    if h % n or w % n:
        raise ValueError(f"map size {h}x{w} is not divisible by the grid size {n}")
    per_cell = maps.reshape(b, n, h // n, n, w // n).sum(dim=(2, 4))  # (B, row, col)
    if tiling == "column-major":
        per_cell = per_cell.transpose(1, 2)
    return per_cell.reshape(b, n * n)


def smooth_maps(maps: Tensor, kernel: int) -> Tensor:
    """k x k average pooling, stride 1, zero padding (k-1)/2 (output keeps its size); k = 1 is identity."""
    check_positive_int(kernel, "smoothing kernel")
    if kernel % 2 == 0:
        raise ValueError(f"smoothing kernel must be odd to keep the map size, got {kernel}")
    if kernel == 1:
        return maps
    # The box filter is separable: two 1-D passes cost 2k instead of k^2 per pixel, same result.
    pad = kernel // 2
    rows = F.avg_pool2d(maps.unsqueeze(1), (kernel, 1), stride=1, padding=(pad, 0))
    return F.avg_pool2d(rows, (1, kernel), stride=1, padding=(0, pad)).squeeze(1)


# --------------------------------------------------------------------------- the score


def grid_pointing_game(
    attributions: Tensor,
    grid_size: int,
    *,
    cells: Tensor | None = None,
    tiling: str = "column-major",
    smooth: int = 1,
    zero_mass: str = "zero",
) -> Scores:
    """GridPG score of every explained cell.

    Args:
        attributions: (G, T, H, W) or (G, T, C, H, W): map t of grid g explains the class of cell
            ``cells[g, t]`` on the whole grid. Channels are summed (all 6 for B-cos encodings).
        grid_size: N.
        cells: (G, T) long, the cell each map explains; default ``arange(N^2)`` (T must be N^2).
        tiling: cell order, ``column-major`` (B-cos v2) or ``row-major`` (ALOE).
        smooth: odd average-pooling kernel applied before the positive part (1 = none).
        zero_mass: value of a map with no positive mass: ``zero`` scores 0 (B-cos v2),
            ``drop-grid`` makes every cell of that grid NaN (ALOE drops the grid), ``nan`` makes
            only that cell NaN. Either way such cells are flagged in ``undefined``.

    Returns:
        :class:`Scores` with ``values`` and ``undefined`` of shape (G, T); values in [0, 1].
    """
    check_tensor(attributions, "attributions", min_dim=4, floating=True)
    check_choice(zero_mass, "zero_mass rule", ZERO_MASS_RULES)
    check_positive_int(grid_size, "grid_size")
    if attributions.dim() == 5:
        attributions = attributions.sum(dim=2)
    elif attributions.dim() != 4:
        raise ValueError(
            f"attributions must be (grids, targets, H, W) or (grids, targets, C, H, W), "
            f"got shape {tuple(attributions.shape)}"
        )
    check_finite(attributions, "attributions")
    g, t, h, w = attributions.shape
    if cells is None:
        if t != grid_size**2:
            raise ValueError(f"without `cells`, one map per cell is needed: got {t} maps for {grid_size**2} cells")
        cells = torch.arange(t, device=attributions.device).expand(g, t)
    elif cells.shape != (g, t):
        raise ValueError(f"cells must have shape {(g, t)} to match the attributions, got {tuple(cells.shape)}")
    elif bool(((cells < 0) | (cells >= grid_size**2)).any()):
        raise ValueError(f"cells must index cells 0..{grid_size**2 - 1}")

    positive = smooth_maps(attributions.reshape(g * t, h, w), smooth).clamp(min=0)
    share, empty = target_share(cell_masses(positive, grid_size, tiling=tiling), cells.reshape(-1).long())
    share, empty = share.reshape(g, t), empty.reshape(g, t)
    if zero_mass == "zero":
        share = torch.where(empty, torch.zeros_like(share), share)
    elif zero_mass == "drop-grid":
        share = torch.where(empty.any(dim=1, keepdim=True), torch.full_like(share, float("nan")), share)
    return Scores(values=share, undefined=empty)


# --------------------------------------------------------------------------- attribution geometry


def sliding_window_maps(
    explain: ExplainFn,
    grids: Tensor,
    targets: Tensor,
    *,
    window: int,
    stride: int,
    padding: int,
    fold: str,
    chunk_size: int = 64,
) -> Tensor:
    """Explain fixed-size-input models (ViTs) on a large grid with sliding windows.

    The grid (zero-padded by ``padding`` in model-input space) is cut into ``window`` x ``window``
    windows at ``stride``; every window is explained for every target of its grid and the window
    maps are folded back: ``fold="sum"`` adds overlaps (B-cosification: window 224, stride 112,
    padding 112), ``fold="mean"`` divides by the number of windows covering each pixel (ALOE:
    window 224, stride 112, no padding).

    Args:
        grids: (G, C, H, W); targets: (G, T) class indices.
    Returns:
        (G, T, H, W) maps, channel-summed.
    """
    check_choice(fold, "fold", ("sum", "mean"))
    g, c, h, w = grids.shape
    t = targets.shape[1]
    hp, wp = h + 2 * padding, w + 2 * padding
    if (hp - window) % stride or (wp - window) % stride or hp < window or wp < window:
        raise ValueError(f"windows of {window} px at stride {stride} do not tile a {h}x{w} grid padded by {padding}")
    padded = F.pad(grids, (padding,) * 4)
    windows = F.unfold(padded, window, stride=stride)  # (G, C*win*win, L)
    n_win = windows.shape[-1]
    windows = windows.transpose(1, 2).reshape(g, n_win, c, window, window)
    # Job j explains window (g, l) for target (g, t); jobs ordered (g, t, l).
    g_idx = torch.arange(g, device=grids.device).repeat_interleave(t * n_win)
    l_idx = torch.arange(n_win, device=grids.device).repeat(g * t)
    job_targets = targets.repeat_interleave(n_win, dim=1).reshape(-1)
    maps = _explain_in_chunks(explain, lambda s: windows[g_idx[s], l_idx[s]], job_targets, chunk_size)
    maps = maps.reshape(g * t, n_win, window * window).transpose(1, 2)
    folded = F.fold(maps, (hp, wp), window, stride=stride)
    if fold == "mean":
        ones = torch.ones(1, window * window, n_win, dtype=maps.dtype, device=maps.device)
        coverage = F.fold(ones, (hp, wp), window, stride=stride)
        if bool((coverage[..., padding : padding + h, padding : padding + w] == 0).any()):
            raise ValueError("sliding windows leave some grid pixels uncovered")
        folded = folded / coverage.clamp(min=1)
    return folded[:, 0, padding : padding + h, padding : padding + w].reshape(g, t, h, w)


def _explain_in_chunks(
    explain: ExplainFn, inputs_for: Callable[[slice], Tensor], targets: Tensor, chunk_size: int
) -> Tensor:
    """Call ``explain`` on job slices of at most ``chunk_size`` and concatenate channel-summed maps."""
    check_positive_int(chunk_size, "chunk_size")
    out = []
    for start in range(0, targets.shape[0], chunk_size):
        s = slice(start, start + chunk_size)
        maps = explain(inputs_for(s), targets[s])
        out.append(maps.sum(dim=1) if maps.dim() == 4 else maps)
    return torch.cat(out)


# --------------------------------------------------------------------------- protocol presets


@dataclass(frozen=True)
class GridPGPreset:
    """One reference implementation's GridPG conventions (see README, "GridPG presets").

    Attributes:
        tiling: ``column-major`` or ``row-major`` cell order.
        selection: ``confidence`` (correct images sorted by max logit, class available while
            sigmoid(logit) > threshold) or ``random-partners`` (random distinct-label partners;
            a grid counts only if every cell alone is correct with probability > threshold).
        threshold: the confidence threshold of the selection rule.
        seed: seed of the class / partner draws.
        smooth: smoothing kernel; ``None`` = :meth:`smoothing_kernel`'s cell-size rule.
        zero_mass: see :func:`grid_pointing_game`.
        vit_windows: ``none`` (whole grid in one pass), ``sum-padded`` or ``mean-unpadded``
            (windows of one cell, stride half a cell; see :func:`sliding_window_maps`).
        grid_size: N for CNNs and for ViTs.
    """

    name: str
    tiling: str
    selection: str
    threshold: float
    seed: int
    smooth: int | None
    zero_mass: str
    vit_windows: str
    grid_size_cnn: int
    grid_size_vit: int
    description: str

    def __post_init__(self) -> None:
        check_choice(self.tiling, "tiling", TILINGS)
        check_choice(self.selection, "selection", SELECTIONS)
        check_choice(self.zero_mass, "zero_mass rule", ZERO_MASS_RULES)
        check_choice(self.vit_windows, "vit_windows", VIT_WINDOWS)

    def grid_size(self, is_vit: bool) -> int:
        return self.grid_size_vit if is_vit else self.grid_size_cnn

    def smoothing_kernel(self, cell_size: int) -> int:
        """Kernel for ``cell_size`` px cells: ``smooth`` if set, else TPAMI's 15 at 224 px scaled
        to the cell size and rounded down to an odd size (224 -> 15, 112 -> 7, 32 -> 1)."""
        if self.smooth is not None:
            return self.smooth
        return max(1, 2 * math.floor((15 * cell_size / 224 - 1) / 2) + 1)


GRIDPG_PRESETS: dict[str, GridPGPreset] = {
    p.name: p
    for p in (
        GridPGPreset(
            name="bcos-v2",
            tiling="column-major",
            selection="confidence",
            threshold=0.5,
            seed=42,
            smooth=None,
            zero_mass="zero",
            vit_windows="none",
            grid_size_cnn=3,
            grid_size_vit=2,
            description="B-cos v2 (TPAMI): confidence-sorted correct images, column-major, smoothing, "
            "whole grid in one pass",
        ),
        GridPGPreset(
            name="bcosification",
            tiling="column-major",
            selection="confidence",
            threshold=0.5,
            seed=42,
            smooth=None,
            zero_mass="zero",
            vit_windows="sum-padded",
            grid_size_cnn=3,
            grid_size_vit=2,
            description="B-cosification (NeurIPS 2024): as bcos-v2; ViTs on cell-size windows, stride "
            "half a cell, zero padding, window maps summed",
        ),
        GridPGPreset(
            name="aloe",
            tiling="row-major",
            selection="random-partners",
            threshold=0.95,
            seed=0,
            smooth=1,
            zero_mass="drop-grid",
            vit_windows="mean-unpadded",
            grid_size_cnn=2,
            grid_size_vit=2,
            description="ALOE: 2x2 random distinct-label partners, every cell alone correct with p > 0.95, "
            "row-major, no smoothing, ViT windows averaged by coverage",
        ),
    )
}


def get_preset(name: str) -> GridPGPreset:
    if name not in GRIDPG_PRESETS:
        raise ValueError(f"unknown GridPG preset {name!r}; valid presets: {', '.join(GRIDPG_PRESETS)}")
    return GRIDPG_PRESETS[name]


def gridpg_maps(
    explain: ExplainFn,
    grids: Tensor,
    cell_labels: Tensor,
    preset: GridPGPreset,
    *,
    is_vit: bool,
    chunk_size: int = 64,
    grid_size: int | None = None,
) -> Tensor:
    """Attribution maps (G, T, H, W) of every target's class on its grid, with the preset's ViT geometry.

    ``cell_labels`` (G, T) are the explained classes, usually one per cell (T = N^2, from which the
    grid size N is inferred); pass ``grid_size`` to explain any other number of targets.
    """
    check_tensor(grids, "grids", min_dim=4, floating=True)
    g, _, h, w = grids.shape
    n = grid_size or _grid_side(cell_labels.shape[1], "cell_labels.shape[1]")
    if is_vit and preset.vit_windows != "none":
        cell = h // n
        return sliding_window_maps(
            explain,
            grids,
            cell_labels,
            window=cell,
            stride=cell // 2,
            padding=cell // 2 if preset.vit_windows == "sum-padded" else 0,
            fold="sum" if preset.vit_windows == "sum-padded" else "mean",
            chunk_size=chunk_size,
        )
    t = cell_labels.shape[1]
    g_idx = torch.arange(g, device=grids.device).repeat_interleave(t)
    maps = _explain_in_chunks(explain, lambda s: grids[g_idx[s]], cell_labels.reshape(-1), chunk_size)
    return maps.reshape(g, t, h, w)


# --------------------------------------------------------------------------- image selection


@dataclass(frozen=True)
class GridSelection:
    """Image indices (G, N^2) of the selected grids, in cell order, and how many candidates were dropped."""

    indices: Tensor
    n_candidates: int
    n_dropped: int


def select_by_confidence(
    labels: Tensor,
    logits: Tensor,
    *,
    grid_size: int,
    n_grids: int | None,
    threshold: float = 0.5,
    seed: int = 42,
) -> GridSelection:
    """B-cos v2 selection: confident correct images of distinct classes, most confident first.

    Candidates are the images the model classifies correctly (argmax logit == label). Per class
    they are sorted by their maximum logit, descending. A class is available while its next
    unused image has ``sigmoid(max logit) > threshold``. While at least N^2 classes are available,
    N^2 distinct available classes are drawn at random (``numpy.random.RandomState(seed)``,
    without replacement) and each contributes its next image. Stops after ``n_grids`` grids
    (``None`` = as many as possible).
    """
    check_tensor(labels, "labels")
    check_tensor(logits, "logits", min_dim=2, floating=True)
    if logits.shape[0] != labels.shape[0]:
        raise ValueError(f"labels ({labels.shape[0]}) and logits ({logits.shape[0]}) differ in length")
    check_finite(logits, "logits")
    conf = logits.detach().max(dim=1).values.double()
    eligible = (logits.argmax(dim=1) == labels) & (conf.sigmoid() > threshold)
    idx = draw_distinct_classes(labels, conf, eligible, per_block=grid_size**2, n_blocks=n_grids, seed=seed)
    return GridSelection(indices=idx, n_candidates=idx.shape[0], n_dropped=0)


def select_random_partners(
    labels: Tensor,
    eligible: Tensor,
    *,
    grid_size: int,
    n_grids: int | None,
    seed: int = 0,
) -> GridSelection:
    """ALOE selection: each anchor image gets random partners of distinct labels.

    Anchors are visited in a seeded random order; for anchor i, cell 0 is image i and the other
    cells are the first images of a seeded random permutation whose labels are not yet in the
    grid. A candidate grid is kept only if every cell is ``eligible`` (ALOE: classified correctly
    on its own with probability > 0.95); the others are dropped and counted.
    """
    check_tensor(labels, "labels")
    if eligible.shape != labels.shape or eligible.dtype != torch.bool:
        raise ValueError("eligible must be a bool tensor with the shape of labels")
    labels_np = labels.detach().cpu().numpy().astype(np.int64)
    eligible_np = eligible.detach().cpu().numpy()
    cells = grid_size * grid_size
    if len(np.unique(labels_np)) < cells:
        raise ValueError(f"a {grid_size}x{grid_size} grid needs {cells} distinct classes; labels have fewer")
    rng = np.random.default_rng(seed)
    m = labels_np.shape[0]
    grids: list[list[int]] = []
    n_candidates = 0
    for anchor in rng.permutation(m):
        if n_grids is not None and len(grids) >= n_grids:
            break
        cell_idx, seen = [int(anchor)], {int(labels_np[anchor])}
        for j in rng.permutation(m):
            if len(cell_idx) == cells:
                break
            if int(labels_np[j]) not in seen:
                cell_idx.append(int(j))
                seen.add(int(labels_np[j]))
        n_candidates += 1
        if eligible_np[cell_idx].all():
            grids.append(cell_idx)
    idx = torch.tensor(grids, dtype=torch.long).reshape(-1, cells)
    return GridSelection(indices=idx, n_candidates=n_candidates, n_dropped=n_candidates - len(grids))


def select_grids(
    preset: GridPGPreset,
    labels: Tensor,
    logits: Tensor,
    *,
    is_vit: bool,
    n_grids: int | None,
    probabilities: Callable[[Tensor], Tensor] = lambda z: z.softmax(dim=1),
) -> GridSelection:
    """Select grid images from per-image ``logits`` (M, K) following ``preset``.

    ``probabilities`` maps logits to class probabilities for the ``random-partners`` rule (softmax
    for standard models, sigmoid for B-cos models as in ALOE).
    """
    n = preset.grid_size(is_vit)
    if preset.selection == "confidence":
        return select_by_confidence(
            labels, logits, grid_size=n, n_grids=n_grids, threshold=preset.threshold, seed=preset.seed
        )
    probs = probabilities(logits)
    p_label = probs.gather(1, labels.long().unsqueeze(1)).squeeze(1)
    eligible = (logits.argmax(dim=1) == labels) & (p_label > preset.threshold)
    return select_random_partners(labels, eligible, grid_size=n, n_grids=n_grids, seed=preset.seed)


def _grid_side(n_cells: int, name: str) -> int:
    n = math.isqrt(n_cells)
    if n * n != n_cells or n < 1:
        raise ValueError(f"{name} must be a square number of cells (4 for 2x2, 9 for 3x3), got {n_cells}")
    return n
