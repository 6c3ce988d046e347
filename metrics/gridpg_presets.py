"""GridPG protocol presets: the conventions of the three reference implementations, by name.

See the README's "GridPG presets" table. A preset fixes the tiling order, the image selection
rule, the smoothing, the zero-mass rule, how ViTs are explained on a grid and the grid size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from faithbench.metrics._checks import check_choice
from faithbench.registry import Registry

TILINGS = ("column-major", "row-major")  # the order a grid's cells are numbered in

ZERO_MASS_RULES = ("zero", "drop-grid", "nan")
SELECTIONS = ("confidence", "random-partners")
VIT_WINDOWS = ("none", "sum-padded", "mean-unpadded")


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
        """Kernel for ``cell_size`` px cells: ``smooth`` if set, else TPAMI Sec. 4's two anchors,
        15 x 15 at 224 px (ImageNet) and 3 x 3 at 32 px (CIFAR-10), interpolated linearly in the
        cell size and rounded to the nearest odd size (224 -> 15, 112 -> 9, 64 -> 5, 32 and 28 -> 3,
        8 px or less -> 1)."""
        if self.smooth is not None:
            return self.smooth
        k = 3 + 12 * (cell_size - 32) / (224 - 32)
        return max(1, 2 * math.floor((k - 1) / 2 + 0.5) + 1)


GRIDPG_PRESETS: Registry[GridPGPreset] = Registry("GridPG preset")

BCOS_V2 = GridPGPreset(
    name="bcos-v2",
    tiling="column-major",
    selection="confidence",
    threshold=0.5,
    seed=42,
    smooth=None,
    zero_mass="zero",
    vit_windows="sum-padded",
    grid_size_cnn=3,
    grid_size_vit=2,
    description="B-cos v2 (TPAMI): confidence-sorted correct images, column-major, smoothing (not GradCAM); "
    "ViTs on cell-size windows at stride half a cell (TPAMI Sec. 4), zero-padded so every pixel is covered 4 times",
)
for _preset in (
    BCOS_V2,
    replace(
        BCOS_V2,
        name="bcosification",
        vit_windows="sum-padded",
        description="B-cosification (NeurIPS 2024, its code): as bcos-v2; ViTs on cell-size windows, stride half "
        "a cell, zero padding, window maps summed",
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
):
    GRIDPG_PRESETS.register(_preset.name, _preset)


def get_preset(name: str) -> GridPGPreset:
    """The preset registered as ``name`` (unknown names list the valid ones)."""
    return GRIDPG_PRESETS.get(name)
