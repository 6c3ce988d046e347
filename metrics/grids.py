"""GridPG test images: choosing images of distinct classes and tiling them into N x N grids.

Two selection rules, as the reference implementations (see :mod:`faithbench.metrics.gridpg_presets`):
``confidence`` (B-cos v2: confident correct images, most confident first) and ``random-partners``
(ALOE: random distinct-label partners, kept only if every cell alone is confidently correct).
Selection is index bookkeeping on the host; tiling is one batched gather.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from faithbench.activations import to_probabilities
from faithbench.metrics._checks import check_choice, check_finite, check_tensor
from faithbench.metrics._selection import draw_distinct_classes
from faithbench.metrics.gridpg_presets import TILINGS, GridPGPreset
from faithbench.metrics.spec import MetricCost, Unit
from faithbench.models.data.lazy_images import LazyImages

# Whose images fill a model's grids: its own, those all models share, or those the models of its build share (build K
# of every model of a suite with builds: each build's comparisons paired, without the other builds' models thinning
# the grids every model must classify confidently).
SHARED_BY_BUILD = "shared-by-build"
PAIRINGS = ("per-model", "shared", SHARED_BY_BUILD)


def make_grids(images: Tensor | LazyImages, indices: Tensor, *, tiling: str = "column-major") -> Tensor:
    """Tile ``images`` (M, C, h, w; or a folder's lazily read images) into grids following ``indices`` (G, N^2)
    -> (G, C, N h, N w).

    Cell k is image ``indices[g, k]``; it sits at row ``k mod N``, column ``k div N`` for
    ``column-major`` tiling (B-cos v2) and at row ``k div N``, column ``k mod N`` for ``row-major``
    (ALOE).
    """
    if not isinstance(images, LazyImages):  # those decode only the cells' images
        check_tensor(images, "images", min_dim=4)
    if indices.dim() != 2:
        raise ValueError(f"indices must be (grids, cells), got shape {tuple(indices.shape)}")
    check_choice(tiling, "tiling", TILINGS)
    n = grid_side(indices.shape[1], "indices.shape[1]")
    g, (_, c, h, w) = indices.shape[0], images.shape
    cells = images[indices.long()]  # (G, N^2, C, h, w)
    if tiling == "row-major":  # cells[g, r*N + c]
        return cells.reshape(g, n, n, c, h, w).permute(0, 3, 1, 4, 2, 5).reshape(g, c, n * h, n * w)
    # column-major: cells[g, c*N + r]
    return cells.reshape(g, n, n, c, h, w).permute(0, 3, 2, 4, 1, 5).reshape(g, c, n * h, n * w)


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
    logits: Tensor | None,
    *,
    is_vit: bool,
    n_grids: int | None,
    activation: str = "softmax",
    shared: tuple[Tensor, Tensor] | None = None,
) -> GridSelection:
    """Select grid images from per-image ``logits`` (M, K) following ``preset``.

    ``activation`` maps logits to class probabilities for the ``random-partners`` rule (softmax
    for standard models, sigmoid for B-cos models as in ALOE). ``shared``: (eligible, score) of images
    shared by several models (:func:`grid_eligibility` of each, combined), drawn from with the preset's rule
    instead of this model's candidates; ``logits`` are then not needed.
    """
    n = preset.grid_size(is_vit)
    if shared is not None:
        eligible, score = shared
        if preset.selection == "confidence":
            idx = draw_distinct_classes(labels, score, eligible, per_block=n * n, n_blocks=n_grids, seed=preset.seed)
            return GridSelection(indices=idx, n_candidates=idx.shape[0], n_dropped=0)
    elif preset.selection == "confidence":
        return select_by_confidence(
            labels, logits, grid_size=n, n_grids=n_grids, threshold=preset.threshold, seed=preset.seed
        )
    else:
        eligible, _ = grid_eligibility(preset, labels, logits, activation)
    return select_random_partners(labels, eligible, grid_size=n, n_grids=n_grids, seed=preset.seed)


def grid_eligibility(preset: GridPGPreset, labels: Tensor, logits: Tensor, activation: str) -> tuple[Tensor, Tensor]:
    """One model's part of a shared grid choice: (M,) whether each image may fill a cell under ``preset``'s rule
    (classified correctly, and confidently: ``sigmoid(max logit)`` for ``confidence``, the label's probability
    for ``random-partners``, above the threshold) and (M,) the label's probability under ``activation``, by
    which shared images are ordered (their mean over the models)."""
    p_label = to_probabilities(logits, activation).gather(1, labels.long().unsqueeze(1)).squeeze(1).double()
    correct = logits.argmax(dim=1) == labels
    if preset.selection == "confidence":
        return correct & (logits.detach().max(dim=1).values.double().sigmoid() > preset.threshold), p_label
    return correct & (p_label > preset.threshold), p_label


def grid_side(n_cells: int, name: str) -> int:
    n = math.isqrt(n_cells)
    if n * n != n_cells or n < 1:
        raise ValueError(f"{name} must be a square number of cells (4 for 2x2, 9 for 3x3), got {n_cells}")
    return n


def grid_cost(unit: Unit, cfg: Any) -> tuple[MetricCost, ...]:
    """GridPG's cost (``cfg``: its config): the model's own grid selection unless shared (one forward per evaluation
    image) and every cell of this piece's grids explained on its grid (ViTs: on each of its cell-size windows at
    stride half a cell, :mod:`faithbench.metrics.windows`). ``n_grids = 0`` counts one grid per N^2 images."""
    preset = cfg.effective_preset()
    n, windows = preset.grid_size(unit.model.is_vit), preset.vit_windows if unit.model.is_vit else "none"
    grids = len(unit.take(cfg.n_grids or len(unit.images) // (n * n)))
    cell = unit.model.input_size[-1]
    pad = cell // 2 if windows == "sum-padded" else 0
    per_grid = 1 if windows == "none" else ((n * cell + 2 * pad - cell) // (cell // 2) + 1) ** 2
    note = "" if cfg.n_grids else "n_grids = 0: as many grids as the confidently classified images allow, at most"
    work = MetricCost(("gridpg", cfg), explanations=grids * per_grid * n * n, repeats=n * n, note=note)
    if "gridpg" in unit.shared:
        return (work,)
    return MetricCost(("gridpg", "selection", cfg), inputs=len(unit.images), scope="model"), work
