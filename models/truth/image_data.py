"""The ground-truth tier's data: seeded images whose class evidence, shared noise and distractors sit in known cells.

An image (1, grid * 7, grid * 7) in [0, 1] of class ``c`` (labels balanced, shuffled) is built cell by cell on
the board of a :class:`~faithbench.models.truth.image_nets.Layout`:

* **evidence**: a non-empty subset of {detector cells..., linear cell}, each of the ``2^n - 1`` subsets equally
  likely; a chosen detector cell holds the class motif ``v M_c`` with ``v ~ U(0.5, 1)``, the linear cell the
  fainter ``v M_c`` with ``v ~ U(0.2, 0.4)``;
* **shared noise**: ``a u`` with ``a ~ U(0, 0.6)`` and ``u`` the noise pattern, added to the linear cell and
  drawn alone in the suppressor cell (independent of the class: the suppressor carries no class information);
* **distractors**: 2 to 4 (at most the number of distractor cells) distractor cells, chosen at random, each
  holding a random class motif or a filled square at intensity ``U(0.5, 1)`` (independent of the class);
* every other cell is black.

No pixel exceeds 1 (0.4 + 0.6 where the linear cell's motif meets the noise), so no clipping breaks the noise
cancellation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from faithbench.models.truth.image_nets import DEFAULT_LAYOUT, PATCH, Layout, blob, motifs, noise_pattern

DETECTOR_INTENSITY = (0.5, 1.0)
LINEAR_INTENSITY = (0.2, 0.4)
NOISE_AMPLITUDE = (0.0, 0.6)
DISTRACTOR_INTENSITY = (0.5, 1.0)
DISTRACTORS = (2, 4)  # fewest, most per image


def _uniform(gen: torch.Generator, n: int, bounds: tuple[float, float]) -> Tensor:
    low, high = bounds
    return low + (high - low) * torch.rand(n, generator=gen)


def truth_images(n: int, seed: int = 0, layout: Layout = DEFAULT_LAYOUT) -> tuple[Tensor, Tensor]:
    """``n`` images (n, 1, grid * 7, grid * 7) float32 in [0, 1] and their labels (n,) int64, from ``seed`` alone
    (the same on every machine: every draw comes from one CPU generator, in a fixed order)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    gen = torch.Generator().manual_seed(seed)
    shapes = motifs()
    classes = len(shapes)
    labels = torch.arange(n)[torch.randperm(n, generator=gen)] % classes
    cells = torch.zeros(n, layout.cells, PATCH, PATCH)

    evidence = (*layout.detector_cells, layout.linear_cell)
    subset = torch.randint(1, 2 ** len(evidence), (n,), generator=gen)  # bit i: evidence cell i is drawn
    for i, k in enumerate(evidence):
        bounds = LINEAR_INTENSITY if k == layout.linear_cell else DETECTOR_INTENSITY
        v = _uniform(gen, n, bounds) * ((subset >> i) & 1)
        cells[:, k] = v.view(-1, 1, 1) * shapes[labels]

    noise = _uniform(gen, n, NOISE_AMPLITUDE).view(-1, 1, 1) * noise_pattern()
    cells[:, layout.linear_cell] += noise
    cells[:, layout.suppressor_cell] = noise

    free = layout.distractor_cells
    if free:
        lo, hi = min(DISTRACTORS[0], len(free)), min(DISTRACTORS[1], len(free))
        count = torch.randint(lo, hi + 1, (n, 1), generator=gen)
        chosen = torch.rand(n, len(free), generator=gen).argsort(dim=1).argsort(dim=1) < count  # random rank < count
        patterns = torch.cat([shapes, blob().unsqueeze(0)])
        kind = torch.randint(0, len(patterns), (n, len(free)), generator=gen)
        v = _uniform(gen, n * len(free), DISTRACTOR_INTENSITY).view(n, len(free), 1, 1)
        cells[:, list(free)] = patterns[kind] * v * chosen.view(n, -1, 1, 1)

    g = layout.grid
    images = cells.view(n, g, g, PATCH, PATCH).permute(0, 1, 3, 2, 4).reshape(n, 1, layout.size, layout.size)
    return images.contiguous(), labels.long()
