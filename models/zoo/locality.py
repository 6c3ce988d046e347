"""Does a model classify grid cells locally? The check GridPG assumes (docs/metrics/gridpg.md).

GridPG explains, for every cell of an N x N grid of digits of N^2 distinct classes, the logit of the
cell's class on the whole grid. That only measures localisation if the model classifies each cell
locally. For every cell, with class c, this module records:

- **positive**: the explained logit of c on the grid, minus the model's logit bias, is > 0 (else
  GridPG explains negative evidence);
- **wins**: the cell's own contribution to the output on the grid is classified as c: c is the
  unique argmax of ``output(grid with every other cell blanked) - output(all-black grid)`` (blank =
  0 in image space, black; a tie is no win). A model that classifies every position locally passes wherever the cell
  sits; one whose head reads only some positions (a dense head slid over the grid) fails.

Why the difference to the all-black grid: a lone digit covers 1 / N^2 of the grid, so under a
global-average-pooled head the background's and the head bias' constant class preferences
outweigh it in the raw output (measured on the zoo's GAP CNN: 97 % of lone cells right by this
definition, 10 % by the raw argmax, which always names the class the black grid votes for); the
constant is not evidence of any cell, and subtracting it leaves what the cell adds.

"The model's output on a grid": one forward pass for models that take any input size (CNNs). Models
with a fixed input size (ViTs) are evaluated as GridPG's ``bcosification`` preset explains them:
windows of one cell at stride half a cell over the grid padded with half a cell of background; the
output is the mean of the window logits (the explained quantity is their sum, of the same sign).
Grids are tiled row-major from images the model classifies correctly on their own (argmax = label);
each grid draws N^2 distinct classes and one such image per class (seeded). Everything is batched:
one call of ``logits_fn`` for the grids, one for the blanked grids and one for a black grid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

LogitsFn = Callable[[Tensor], Tensor]
"""``logits_fn(images in [0, 1] (n, C, H, W)) -> logits (n, K)``: encoding included, no gradient needed."""


@dataclass(frozen=True)
class Locality:
    """Fractions of grid cells (in [0, 1]) whose class has a positive logit / wins inside its cell."""

    positive: float
    wins: float
    n_cells: int
    grid_size: int


def distinct_class_grids(labels: Tensor, eligible: Tensor, *, grid_size: int, n_grids: int, seed: int = 0) -> Tensor:
    """Image indices (G, N^2): per grid, N^2 distinct classes drawn at random, one eligible image each."""
    if eligible.shape != labels.shape or eligible.dtype != torch.bool:
        raise ValueError("eligible must be a bool tensor with the shape of labels")
    classes = torch.unique(labels[eligible])
    cells = grid_size * grid_size
    if len(classes) < cells:
        raise ValueError(
            f"a {grid_size}x{grid_size} grid needs {cells} classes with eligible images, got {len(classes)}"
        )
    pools = [torch.nonzero(eligible & (labels == c)).flatten() for c in classes.tolist()]
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n_grids):
        chosen = torch.randperm(len(classes), generator=gen)[:cells].tolist()
        rows.append([int(pools[k][torch.randint(len(pools[k]), (1,), generator=gen)]) for k in chosen])
    return torch.tensor(rows, dtype=torch.long).reshape(n_grids, cells)


def tile(images: Tensor, indices: Tensor) -> Tensor:
    """Row-major grids (G, C, N h, N w) of ``images`` (M, C, h, w); cell k of grid g is ``indices[g, k]``
    at row ``k div N``, column ``k mod N``."""
    g, cells = indices.shape
    n = int(round(cells**0.5))
    if n * n != cells:
        raise ValueError(f"indices must have a square number of cells, got {cells}")
    _, c, h, w = images.shape
    return images[indices].reshape(g, n, n, c, h, w).permute(0, 3, 1, 4, 2, 5).reshape(g, c, n * h, n * w)


def blanked_grids(images: Tensor, indices: Tensor) -> Tensor:
    """(G * N^2, C, N h, N w): for grid g and cell k (row g * N^2 + k), the grid with every cell but k black."""
    blank = len(images)
    ext = torch.cat([images, torch.zeros_like(images[:1])])
    g, cells = indices.shape
    only = torch.full((g, cells, cells), blank, dtype=torch.long)
    eye = torch.eye(cells, dtype=torch.bool).expand(g, cells, cells)
    only[eye] = indices.reshape(-1)
    return tile(ext, only.reshape(g * cells, cells))


def windowed_logits(logits_fn: LogitsFn, grids: Tensor, *, window: int) -> Tensor:
    """Mean logits (G, K) over the ``window`` px windows at stride ``window // 2`` of each grid padded by
    ``window // 2`` of background (how a fixed-size model sees a grid under the ``bcosification`` preset)."""
    stride = pad = window // 2
    g, c = grids.shape[:2]
    cols = F.unfold(F.pad(grids, (pad,) * 4), window, stride=stride)  # (G, C*w*w, L)
    n_win = cols.shape[-1]
    windows = cols.transpose(1, 2).reshape(g * n_win, c, window, window)
    return logits_fn(windows).reshape(g, n_win, -1).mean(dim=1)


def cell_checks(
    logits_fn: LogitsFn,
    images: Tensor,
    labels: Tensor,
    indices: Tensor,
    *,
    logit_bias: float = 0.0,
    window: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Per cell (G, N^2) bools: (positive, wins), as defined in the module docstring.

    ``window`` = the fixed input size of the model (cell-size windows), ``None`` for any-size models.
    """

    def grid_logits(grids: Tensor) -> Tensor:
        return logits_fn(grids) if window is None else windowed_logits(logits_fn, grids, window=window)

    g, cells = indices.shape
    classes = labels[indices]  # (G, N^2)
    on_grid = grid_logits(tile(images, indices))  # (G, K)
    positive = on_grid.gather(1, classes) - logit_bias > 0
    alone = grid_logits(blanked_grids(images, indices)).reshape(g, cells, -1)
    black = grid_logits(torch.zeros_like(tile(images, indices[:1])))  # (1, K)
    added = alone - black.unsqueeze(1)  # (G, N^2, K): what each cell adds
    own = added.gather(-1, classes.unsqueeze(-1)).squeeze(-1)
    wins = own > added.scatter(-1, classes.unsqueeze(-1), float("-inf")).amax(dim=-1)  # strictly: a tie is no win
    return positive, wins


def locality(
    logits_fn: LogitsFn,
    images: Tensor,
    labels: Tensor,
    *,
    grid_size: int,
    n_grids: int = 50,
    logit_bias: float = 0.0,
    window: int | None = None,
    seed: int = 0,
) -> Locality:
    """The locality check of a model on ``n_grids`` grids of ``images`` it classifies correctly alone.

    A model that gets fewer than N^2 classes right has no such grid: NaN fractions, ``n_cells`` = 0.
    """
    eligible = logits_fn(images).argmax(dim=1) == labels
    if len(torch.unique(labels[eligible])) < grid_size * grid_size:
        return Locality(positive=float("nan"), wins=float("nan"), n_cells=0, grid_size=grid_size)
    indices = distinct_class_grids(labels, eligible, grid_size=grid_size, n_grids=n_grids, seed=seed)
    positive, wins = cell_checks(logits_fn, images, labels, indices, logit_bias=logit_bias, window=window)
    return Locality(
        positive=positive.float().mean().item(),
        wins=wins.float().mean().item(),
        n_cells=positive.numel(),
        grid_size=grid_size,
    )


def model_locality(model: Any, images: Tensor, labels: Tensor, *, n_grids: int = 50, seed: int = 0) -> Locality:
    """The check as ``bench zoo`` and the claims' eligibility run it on an image model adapter: 3 x 3 grids for
    CNNs, 2 x 2 for ViTs seen through windows of their input size at stride half a window."""
    return locality(
        model.predict_logits,
        images,
        labels,
        grid_size=2 if model.is_vit else 3,
        n_grids=n_grids,
        logit_bias=model.logit_bias,
        window=model.input_size[0] if model.is_vit else None,
        seed=seed,
    )
