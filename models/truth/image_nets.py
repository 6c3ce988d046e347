"""Hand-set networks whose exact attribution is known by construction: the ground-truth tier.

The additive patch network cuts a ``(grid * 7) px`` square one-channel image into ``grid x grid`` cells of 7 x 7
pixels (cell ``k = row * grid + column``) and scores class ``c`` as

    f_c(x) = sum_{m, k} W[c, m, k] relu(<d_m, x_k> + b_m) + beta_c

with hand-set kernels ``d_m`` (one per channel ``m``), channel biases ``b_m <= 0``, head weights ``W`` and class
biases ``beta_c`` (all 0). Each term depends on one cell only, so the logit is a sum of per-cell functions
``g_{c,k}(x_k)`` and its exact attribution is known (:mod:`faithbench.models.truth.image_exact`;
``docs/ground-truth.md``).
It is one strided convolution, a ReLU, a flatten and a linear layer, so every CNN method (gradients, LRP,
DeepLift, GradCAM on ``detect``, occlusion-style sampling) applies to it.

The channels (:func:`kernels`), for the four class motifs ``M_c`` (:data:`MOTIF_NAMES`):

* ``detector c``: ``d = M_c / |M_c| - 3 (1 - M_c) / (49 - |M_c|)``, bias ``-TAU``: fires on its own motif at
  intensity ``v > TAU`` (response ``v``), never on another motif (response at most 0.15 v, tested);
* ``template c`` and ``-template c``: ``t_c = M_c / |M_c| - (1 - M_c) / (49 - |M_c|)`` and its negative,
  bias 0: the pair ``relu(z) - relu(-z) = z`` reads the linear cell linearly;
* ``noise``: the noise pattern ``u`` (the centre column), bias 0: reads the suppressor cell (``x >= 0``, so
  the ReLU never acts).

The head (:func:`head_weights`) gives class ``c`` weight ``ALPHA`` on its detector in each detector cell,
``+GAMMA`` / ``-GAMMA`` on its template pair in the linear cell and ``-GAMMA <t_c, u> / <u, u>`` on the noise
channel in the suppressor cell, which cancels exactly what the shared noise ``a u`` adds to the linear cell
(``GAMMA a <t_c, u>``). Every other weight is 0: the distractor cells have no weight for any class.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

PATCH = 7  # cell side in pixels
MOTIF_NAMES = ("plus", "cross", "ring", "diamond")  # the classes, in label order
ALPHA = 2.0  # weight of a class's detector in each detector cell
GAMMA = 2.0  # weight of a class's linear template in the linear cell
TAU = 0.3  # detector threshold: the motifs' intensities are >= 0.5, a foreign motif responds <= 0.15
OFF_MOTIF = 3.0  # the detectors' penalty on ink off their motif (the templates': 1)


@dataclass(frozen=True)
class Layout:
    """Where the evidence sits on a ``grid x grid`` board of 7 px cells (cell ``k = row * grid + column``).

    ``detector_cells`` hold a class motif read by thresholded detectors; ``linear_cell`` holds a fainter motif
    plus the shared noise, read linearly; ``suppressor_cell`` holds the shared noise only; every other cell is a
    distractor cell (weight 0 for every class).
    """

    grid: int = 4
    detector_cells: tuple[int, ...] = (5, 10)
    linear_cell: int = 6
    suppressor_cell: int = 9

    def __post_init__(self) -> None:
        used = (*self.detector_cells, self.linear_cell, self.suppressor_cell)
        if self.grid < 2 or len(set(used)) != len(used) or not all(0 <= k < self.cells for k in used):
            raise ValueError(
                f"a layout needs grid >= 2 and distinct evidence cells in 0..{self.cells - 1}; got grid "
                f"{self.grid}, detector cells {self.detector_cells}, linear {self.linear_cell}, "
                f"suppressor {self.suppressor_cell}"
            )

    @property
    def cells(self) -> int:
        return self.grid * self.grid

    @property
    def size(self) -> int:
        """Image side in pixels."""
        return self.grid * PATCH

    @property
    def distractor_cells(self) -> tuple[int, ...]:
        used = {*self.detector_cells, self.linear_cell, self.suppressor_cell}
        return tuple(k for k in range(self.cells) if k not in used)

    def cell_index(self) -> Tensor:
        """(size, size) int64: the cell ``k = row * grid + column`` of every pixel."""
        block = torch.arange(self.size) // PATCH
        return block.view(-1, 1) * self.grid + block.view(1, -1)


DEFAULT_LAYOUT = Layout()  # 28 px: the shape of the zoo's digit models
SMALL_LAYOUT = Layout(grid=3, detector_cells=(0, 4), linear_cell=2, suppressor_cell=6)  # 21 px: exhaustive tests


def _pattern(pixels: list[tuple[int, int]]) -> Tensor:
    m = torch.zeros(PATCH, PATCH)
    for r, c in pixels:
        m[r, c] = 1.0
    return m


def motifs() -> Tensor:
    """(4, 7, 7) the class motifs in {0, 1}: plus, cross (X), ring, diamond, each inside the central 5 x 5."""
    inner = range(1, 6)
    plus = [(3, i) for i in inner] + [(i, 3) for i in inner]
    cross = [(i, i) for i in inner] + [(i, 6 - i) for i in inner]
    ring = [(1, i) for i in inner] + [(5, i) for i in inner] + [(i, j) for i in range(2, 5) for j in (1, 5)]
    diamond = [(1, 3), (2, 2), (2, 4), (3, 1), (3, 5), (4, 2), (4, 4), (5, 3)]
    return torch.stack([_pattern(p) for p in (plus, cross, ring, diamond)])


def noise_pattern() -> Tensor:
    """(7, 7) the shared noise's pattern ``u`` in {0, 1}: the centre column (it overlaps the plus most)."""
    return _pattern([(r, PATCH // 2) for r in range(PATCH)])


def blob() -> Tensor:
    """(7, 7) a filled 5 x 5 square: a bright distractor with no class shape."""
    return _pattern([(r, c) for r in range(1, 6) for c in range(1, 6)])


def template(motif: Tensor, off: float) -> Tensor:
    """``M / |M| - off (1 - M) / (49 - |M|)``: response 1 to the motif at intensity 1, ``-off`` to a full patch
    of ink off it."""
    n = motif.sum()
    return motif / n - off * (1 - motif) / (motif.numel() - n)


def kernels() -> tuple[Tensor, Tensor]:
    """(M, 7, 7) kernels and (M,) biases of the channels: 4 detectors, 4 templates, 4 negated templates, noise."""
    m = motifs()
    detectors = torch.stack([template(k, OFF_MOTIF) for k in m])
    templates = torch.stack([template(k, 1.0) for k in m])
    weights = torch.cat([detectors, templates, -templates, noise_pattern().unsqueeze(0)])
    biases = torch.cat([torch.full((len(m),), -TAU), torch.zeros(2 * len(m) + 1)])
    return weights, biases


def head_weights(layout: Layout, *, suppressor: bool = True) -> Tensor:
    """(C, M, K) the weight of channel ``m`` in cell ``k`` for class ``c`` (``suppressor=False``: the noise
    channel's weights 0, the ablation that shows what the suppressor is for)."""
    weights, _ = kernels()
    classes, channels = len(MOTIF_NAMES), len(weights)
    noise = noise_pattern()
    w = torch.zeros(classes, channels, layout.cells)
    for c in range(classes):
        for k in layout.detector_cells:
            w[c, c, k] = ALPHA
        w[c, classes + c, layout.linear_cell] = GAMMA
        w[c, 2 * classes + c, layout.linear_cell] = -GAMMA
        if suppressor:
            leak = (weights[classes + c] * noise).sum() / (noise * noise).sum()  # <t_c, u> / <u, u>
            w[c, channels - 1, layout.suppressor_cell] = -GAMMA * leak
    return w


class PatchAdditiveNet(nn.Module):
    """``f_c(x) = sum_{m,k} W[c, m, k] relu(<d_m, x_k> + b_m) + beta_c`` on (B, 1, grid * 7, grid * 7) input.

    ``detect`` (a 7 x 7 convolution with stride 7, then a ReLU) gives every channel's response in every cell;
    ``head`` (a linear layer on the flattened (M, grid, grid) responses) weighs them per class and cell.
    """

    def __init__(self, kernels: Tensor, biases: Tensor, head: Tensor, class_bias: Tensor, layout: Layout) -> None:
        super().__init__()
        channels, classes = kernels.shape[0], head.shape[0]
        if head.shape != (classes, channels, layout.cells) or class_bias.shape != (classes,):
            raise ValueError(
                f"head must be (classes, {channels}, {layout.cells}) and class_bias (classes,); got "
                f"{tuple(head.shape)} and {tuple(class_bias.shape)}"
            )
        self.layout = layout
        self.detect = nn.Sequential(nn.Conv2d(1, channels, PATCH, stride=PATCH), nn.ReLU())
        self.flatten = nn.Flatten()
        self.head = nn.Linear(channels * layout.cells, classes)
        with torch.no_grad():
            self.detect[0].weight.copy_(kernels.unsqueeze(1))
            self.detect[0].bias.copy_(biases)
            self.head.weight.copy_(head.reshape(classes, -1))  # (M, grid, grid) flattened channel-major
            self.head.bias.copy_(class_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.flatten(self.detect(x)))


def additive_patch_net(layout: Layout = DEFAULT_LAYOUT, *, suppressor: bool = True) -> PatchAdditiveNet:
    """The hand-set additive patch network of ``layout`` (4 classes; no class bias), in eval mode."""
    weights, biases = kernels()
    head = head_weights(layout, suppressor=suppressor)
    return PatchAdditiveNet(weights, biases, head, torch.zeros(len(MOTIF_NAMES)), layout).eval()
