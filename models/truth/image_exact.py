"""The exact attribution of the hand-set models (the ground-truth tier), and their adapters.

For :class:`~faithbench.models.truth.image_nets.PatchAdditiveNet`, ``f_c(x) = sum_{m,k} W[c,m,k] relu(s_mk + b_m)``
(+ a constant) with ``s_mk = <d_m, x_k>`` the response of channel ``m`` to cell ``k``. Per cell:

    T_k = g_{c,k}(x_k) - g_{c,k}(0),     g_{c,k}(x_k) = sum_m W[c,m,k] relu(<d_m, x_k> + b_m)

is exactly the Shapley value of cell ``k`` (players: the cells; absent cells set to 0), and equally its Banzhaf
value, its occlusion (leave-one-out) effect and its Integrated Gradients / DeepLift total: the game is additive, so
every attribution axiom system agrees, and ``sum_k T_k = f_c(x) - f_c(0)``. Within a cell the truth is split over
pixels ``p`` by each channel's Aumann-Shapley (Integrated Gradients) share, exact in closed form:

    t(p) = sum_m W[c,m,k] (relu(s_mk + b_m) - relu(b_m)) / s_mk * d_m(p) x(p)      (0 where s_mk = 0)

which sums to ``T_k`` in every cell. Where every weighted channel of a cell is bias-free and linear over the
pixels (the linear and suppressor cells) it is also the pixels' Shapley value and equals input x gradient; in a
detector cell holding its own motif the motif's pixels are symmetric players, so it is their Shapley value too.
Elsewhere the pixel split is the Aumann-Shapley one, not the only one: the cell is the resolution where the truth
is exact for every input and target (``docs/ground-truth.md``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.models.adapter import ModelAdapter, ModelFacts
from faithbench.models.encoding import InputEncoding
from faithbench.models.truth.hand_set import hand_set_specs
from faithbench.models.truth.image_nets import (
    DEFAULT_LAYOUT,
    MOTIF_NAMES,
    PATCH,
    PatchAdditiveNet,
    additive_patch_net,
)

RESOLUTIONS = ("patch", "pixel")
IDENTITY = InputEncoding("identity", 1)  # the model reads the image in [0, 1] itself: baseline 0 is black


def _net(model: ModelAdapter | PatchAdditiveNet) -> PatchAdditiveNet:
    net = model.module if isinstance(model, ModelAdapter) else model
    if not isinstance(net, PatchAdditiveNet):
        raise TypeError(f"the exact attribution is known for a PatchAdditiveNet only, got {type(net).__name__}")
    return net


def _check(net: PatchAdditiveNet, inputs: Tensor, targets: Tensor) -> None:
    size = net.layout.size
    if inputs.dim() != 4 or inputs.shape[1:] != (1, size, size):
        raise ValueError(f"inputs must be (B, 1, {size}, {size}), got shape {tuple(inputs.shape)}")
    if targets.shape != inputs.shape[:1]:
        raise ValueError(f"targets must have shape ({inputs.shape[0]},), got {tuple(targets.shape)}")


def _channel_shares(net: PatchAdditiveNet, inputs: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(responses s (B, M, g, g), exact contributions W[c,m,k] (relu(s + b) - relu(b)) (B, M, g, g)), float64."""
    _check(net, inputs, targets)
    conv = net.detect[0]
    x = inputs.detach().double()
    s = F.conv2d(x, conv.weight.detach().double(), stride=PATCH)
    b = conv.bias.detach().double().view(1, -1, 1, 1)
    g = net.layout.grid
    w = net.head.weight.detach().double()[targets.long().to(inputs.device)].view(len(x), -1, g, g)
    return s, w * (F.relu(s + b) - F.relu(b))


def cell_truth(model: ModelAdapter | PatchAdditiveNet, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, K) float64: ``T_k``, the exact contribution of each cell to logit ``targets[b]`` (its Shapley value over
    the cells, baseline 0); the cells of a row sum to ``f_t(x) - f_t(0)``."""
    _, shares = _channel_shares(_net(model), inputs, targets)
    return shares.sum(dim=1).flatten(1)


def true_attribution(model: ModelAdapter | PatchAdditiveNet, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, H, W) float64: the pixel truth ``t(p)`` (module docstring); each cell sums to :func:`cell_truth`, the
    whole map to ``f_t(x) - f_t(0)``."""
    net = _net(model)
    s, shares = _channel_shares(net, inputs, targets)
    ratio = torch.where(s != 0, shares / torch.where(s != 0, s, 1.0), 0.0)  # s = 0: the share is exactly 0
    per_pixel = F.conv_transpose2d(ratio, net.detect[0].weight.detach().double(), stride=PATCH)  # sum_m ratio_mk d_m(p)
    return (per_pixel * inputs.detach().double())[:, 0]


def true_support(
    model: ModelAdapter | PatchAdditiveNet, inputs: Tensor, targets: Tensor, resolution: str = "patch"
) -> Tensor:
    """(B, H, W) bool: where the truth is positive, by cell (``patch``: every pixel of a cell with ``T_k > 0``) or
    by pixel (``pixel``: ``t(p) > 0``)."""
    if resolution not in RESOLUTIONS:
        raise ValueError(f"unknown resolution {resolution!r}; valid: {', '.join(RESOLUTIONS)}")
    if resolution == "pixel":
        return true_attribution(model, inputs, targets) > 0
    cells = _net(model).layout.cell_index().to(inputs.device)
    return (cell_truth(model, inputs, targets) > 0)[:, cells]


class GroundTruth:
    """A hand-set model's exact attribution, as its adapter carries it (``ModelAdapter.truth``).

    ``truth(inputs, targets)`` is the (B, H, W) float64 pixel truth of model inputs and targets;
    ``truth.cells`` the (H, W) cell of every pixel (the resolution at which the truth is exact for every input).
    """

    def __init__(self, net: PatchAdditiveNet) -> None:
        self.net = net

    @property
    def cells(self) -> Tensor:
        return self.net.layout.cell_index()

    def __call__(self, inputs: Tensor, targets: Tensor) -> Tensor:
        return true_attribution(self.net, inputs, targets)


def _adapter(name: str, description: str, suppressor: bool) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        net = additive_patch_net(DEFAULT_LAYOUT, suppressor=suppressor)
        layout = net.layout
        adapter = ModelAdapter(
            name=name,
            family="standard",
            module=net,
            encoding=IDENTITY,
            num_classes=len(MOTIF_NAMES),
            input_size=(layout.size, layout.size),
            conv_layer="detect",
            description=description,
            info={
                "source": "hand-set",
                "classes": list(MOTIF_NAMES),
                "detector_cells": list(layout.detector_cells),
                "linear_cell": layout.linear_cell,
                "suppressor_cell": layout.suppressor_cell if suppressor else None,
                "distractor_cells": list(layout.distractor_cells),
            },
            truth=GroundTruth(net),
        )
        return adapter.to(device)

    return build


_ADDITIVE = (
    "hand-set additive patch CNN (4 motif classes, 4 x 4 cells of 7 px; thresholded detectors, a linear cell, "
    "a suppressor cell, distractor cells): its exact attribution is known (the truth data set)"
)
_NO_SUPPRESSOR = "truth_additive without its suppressor weights (the shared noise is not cancelled)"
SPECS = hand_set_specs(
    _adapter,
    (("truth_additive", _ADDITIVE, True), ("truth_additive_nosup", _NO_SUPPRESSOR, False)),
    dataset="truth",
    encoding=IDENTITY,
    facts=ModelFacts(
        input_size=(DEFAULT_LAYOUT.size,) * 2, num_classes=len(MOTIF_NAMES), conv_layer="detect", truth=True
    ),
)
