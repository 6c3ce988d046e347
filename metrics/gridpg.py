"""GridPG, the grid pointing game (B-cos TPAMI Sec. 4 / App. C.2.1, B-cosification, ALOE App. A).

An N x N grid image tiles N^2 images of distinct classes. For each cell i the logit of cell i's class is explained on
the whole grid; the score of cell i is the share of positive attribution that falls inside cell i:

    L_i = sum_{p in cell i} A+(p) / sum_p A+(p),    A+ = max(smooth_k(sum_c A_c), 0)

A uniform map scores 1/N^2, a map concentrated in the right cell scores 1. The reference implementations differ in
tiling order, image selection, smoothing, zero-mass handling and ViT windows; each is a named preset
(:mod:`faithbench.metrics.gridpg_presets`); grid selection and tiling are in :mod:`faithbench.metrics.grids`, windowed
explanation in :mod:`faithbench.metrics.windows`. The score is batched over grids and cells.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.metrics._checks import check_choice, check_finite, check_positive_int, check_tensor
from faithbench.metrics._share import target_share
from faithbench.metrics.gridpg_presets import GRIDPG_PRESETS, VIT_WINDOWS, ZERO_MASS_RULES, GridPGPreset, get_preset
from faithbench.metrics.grids import PAIRINGS, TILINGS, grid_cost, grid_eligibility, grid_side, make_grids, select_grids
from faithbench.metrics.spec import Example, MetricResult, Unit
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores
from faithbench.metrics.windows import ExplainFn, explain_grids

if TYPE_CHECKING:
    from faithbench.models.adapter import ModelAdapter

# --------------------------------------------------------------------------- the score


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


def cell_indicator(grid_size: int, height: int, width: int, *, tiling: str = "column-major") -> Tensor:
    """(N^2, H, W) bool: mask k covers grid cell k in the cell order of ``tiling`` (as :func:`cell_masses`)."""
    n = grid_size
    row = torch.arange(height) // (height // n)
    col = torch.arange(width) // (width // n)
    index = col[None, :] * n + row[:, None] if tiling == "column-major" else row[:, None] * n + col[None, :]
    return index[None] == torch.arange(n * n)[:, None, None]


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

    Example:
        >>> import torch
        >>> from faithbench.metrics import grid_pointing_game
        >>> maps = torch.zeros(1, 2, 4, 4)  # one 2 x 2 grid of 2 px cells; map 0: 12 in cell 0, 4 in cell 3
        >>> maps[0, 0, :2, :2], maps[0, 0, 2:, 2:], maps[0, 1, :2, 2:] = 3.0, 1.0, -1.0  # map 1: no positive mass
        >>> out = grid_pointing_game(maps, 2, cells=torch.tensor([[0, 2]]), tiling="row-major")
        >>> out.values, out.undefined  # 12 / 16; a map without positive mass scores 0 and is flagged
        (tensor([[0.7500, 0.0000]]), tensor([[False,  True]]))
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
    """Maps (G, T, H, W) of every target's class on its grid, with the preset's ViT geometry.

    ``cell_labels`` (G, T) are the explained classes, usually one per cell (T = N^2, from which the
    grid size N is inferred); pass ``grid_size`` to explain any other number of targets.
    """
    check_tensor(grids, "grids", min_dim=4, floating=True)
    n = grid_size or grid_side(cell_labels.shape[1], "cell_labels.shape[1]")
    windows = preset.vit_windows if is_vit else "none"
    return explain_grids(explain, grids, cell_labels, grid_size=n, windows=windows, chunk_size=chunk_size)


# --------------------------------------------------------------------------- the suite's metric


@dataclass(frozen=True)
class GridPGConfig:
    """``[gridpg]``: the protocol preset, how many grids to select per model (0: every grid the data allows),
    whose images they use (``pairing``: ``per-model``, each model its own confident images as the papers do, or
    ``shared``, images every model of the suite classifies correctly and confidently, so that models are
    compared on the same grids, or ``shared-by-build``, shared among build K of every model of a suite with
    ``builds``, each build's models on the same grids), and overrides of the preset: its ViT geometry
    (``vit_windows = "none"``: whole grids in one pass), its smoothing kernel (``smooth``: 0 = the preset's, 1 =
    none, k = a k x k mean filter) and its zero-mass rule. The last two only change the scoring (``bench rescore``
    can apply them)."""

    preset: str = "bcos-v2"
    n_grids: int = 24
    pairing: str = "per-model"  # per-model | shared | shared-by-build
    vit_windows: str = "preset"  # preset | none | sum-padded | mean-unpadded
    smooth: int = 0
    zero_mass: str = "preset"

    protocols: ClassVar[dict[str, tuple]] = {"smooth": (0, 1), "zero_mass": ("preset", "zero", "drop-grid")}
    cli: ClassVar[dict[str, str]] = {
        "preset": "GridPG protocol preset (bcos-v2, bcosification, aloe)",
        "n_grids": "GridPG grids per model",
    }

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if isinstance(self.n_grids, bool) or not isinstance(self.n_grids, int) or self.n_grids < 0:
            raise ValueError(f"n_grids must be a positive integer or 0 (every selectable grid), got {self.n_grids!r}")
        check_choice(self.pairing, "pairing", PAIRINGS)
        check_choice(self.vit_windows, "vit_windows", ("preset", *VIT_WINDOWS))
        check_choice(self.zero_mass, "zero_mass", ("preset", *ZERO_MASS_RULES))
        if (
            isinstance(self.smooth, bool)
            or not isinstance(self.smooth, int)
            or self.smooth < 0
            or (self.smooth and self.smooth % 2 == 0)
        ):
            raise ValueError(f"smooth must be 0 (the preset's), 1 (none) or an odd kernel size, got {self.smooth!r}")

    def effective_preset(self) -> GridPGPreset:
        """The preset with this config's overrides applied."""
        preset = get_preset(self.preset)
        if self.vit_windows != "preset":
            preset = replace(preset, vit_windows=self.vit_windows)
        if self.smooth:
            preset = replace(preset, smooth=self.smooth)
        if self.zero_mass != "preset":
            preset = replace(preset, zero_mass=self.zero_mass)
        return preset


@dataclass(frozen=True)
class PreparedGrids:
    """A model's GridPG grids (shared by all its methods): encoded grids and cell labels on the device."""

    grids: Tensor  # (G, C, N h, N w)
    labels: Tensor  # (G, N^2)
    info: dict[str, Any]


def pairing_models(cfg: GridPGConfig, suite_models: Mapping[str, str]) -> tuple[str, ...]:
    """The models whose images fill every model's grids: all of the suite's under ``shared`` and
    ``shared-by-build`` (the runner groups them by build), else none."""
    return tuple(suite_models) if cfg.pairing != "per-model" else ()


def eligibility(
    model: ModelAdapter, images: Tensor, labels: Tensor, cfg: GridPGConfig, device: torch.device, batch: int
) -> tuple[Tensor, Tensor]:
    """One model's part of a shared grid choice (:func:`faithbench.metrics.grids.grid_eligibility`)."""
    logits = model.predict_logits(images, batch, device)
    return grid_eligibility(cfg.effective_preset(), labels, logits, model.activation)


def prepare_grids(unit: Unit, cfg: GridPGConfig) -> PreparedGrids:
    preset = cfg.effective_preset()
    model = unit.model
    shared = unit.shared.get("gridpg")  # shared: the runner has run every model over the images already
    logits = None if shared is not None else model.predict_logits(unit.images, unit.eval_batch, unit.device)
    sel = select_grids(
        preset,
        unit.labels,
        logits,
        is_vit=model.is_vit,
        n_grids=cfg.n_grids or None,
        activation=model.activation,
        shared=None if shared is None else (shared.eligible, shared.score),
    )
    n = preset.grid_size(model.is_vit)
    if len(sel.indices) == 0:
        print(f"[faithbench] no GridPG grid for {model.name}: too few confidently classified images", file=sys.stderr)
    info = {
        "preset": preset.name,
        "grid_size": n,
        "vit_windows": preset.vit_windows if model.is_vit else "none",
        "smooth": preset.smoothing_kernel(unit.images.shape[-1]),
        "zero_mass": preset.zero_mass,
        "n_grids": int(sel.indices.shape[0]),
        "n_candidates": sel.n_candidates,
        "n_dropped": sel.n_dropped,
        "pairing": f"shared ({len(shared.models)} models)" if shared is not None else "per-model",
        "cluster_size": n * n,  # the cells of one grid: intervals and tests are by grid
    }
    grids = model.encode(make_grids(unit.images, sel.indices, tiling=preset.tiling)).to(unit.device)
    return PreparedGrids(grids, unit.labels[sel.indices].to(unit.device), info)


def evaluate(unit: Unit, cfg: GridPGConfig) -> MetricResult:
    """Every cell of this shard's grids, explained on its grid and scored; ids = grid * N^2 + cell."""
    prep = unit.per_model(("gridpg", cfg), lambda: prepare_grids(unit, cfg))
    preset = cfg.effective_preset()
    n = prep.info["grid_size"]
    # GradCAM's maps are coarse already: TPAMI Sec. 4 smooths every method except GradCAM.
    info = {**prep.info, "smooth": 1 if unit.method.capabilities.coarse else prep.info["smooth"]}
    g = unit.take(len(prep.grids)).to(prep.grids.device)
    if len(g) == 0:  # zero grids (or none left for this shard) are recorded as zero grids
        return MetricResult.empty(info, "gridpg")
    if unit.method.capabilities.ground_truth:  # the oracle control: the explained cell itself
        h, w = prep.grids.shape[-2:]
        truth = cell_indicator(n, h, w, tiling=preset.tiling).to(prep.grids.device).expand(len(g), n * n, h, w)
        maps = unit.timed_explanation("gridpg", lambda: unit.method.from_truth(truth))
    else:
        grids, labels, vit, chunk = prep.grids[g], prep.labels[g], unit.model.is_vit, unit.explain_batch
        explain = partial(gridpg_maps, unit.explain, grids, labels, preset, is_vit=vit, chunk_size=chunk)
        maps = unit.timed_explanation("gridpg", explain)
    scores = grid_pointing_game(maps, n, tiling=preset.tiling, smooth=info["smooth"], zero_mass=preset.zero_mass)
    ids = (g.view(-1, 1) * n * n + torch.arange(n * n, device=g.device)).reshape(-1)
    values, undefined = scores.values.reshape(-1), scores.undefined.reshape(-1)
    return MetricResult(values=values, undefined=undefined, sample_ids=ids, params=info, explained="gridpg")


def example(unit: Unit, cfg: GridPGConfig) -> Example:
    """The report's panel: the first image of each of the first four classes on a 2x2 grid (the same
    for every model), the top-left cell's class explained with the preset's geometry."""
    first = [int((unit.labels == k).nonzero()[0]) for k in unit.labels.unique()[:4]]
    image = make_grids(unit.images, torch.tensor([first]), tiling="row-major")[0]
    label = int(unit.labels[first[0]])
    grid = unit.model.encode(image.unsqueeze(0)).to(unit.device)
    target = torch.tensor([[label]], device=unit.device)
    maps = gridpg_maps(unit.explain, grid, target, cfg.effective_preset(), is_vit=unit.model.is_vit, grid_size=2)
    return Example(image, maps[0, 0].cpu(), label, f"class {label} (top-left cell) explained on the same grid")


SPEC = described(
    "gridpg",
    evaluate=evaluate,
    config=GridPGConfig,
    conventions=GRIDPG_PRESETS,
    example=example,
    pairing=pairing_models,
    eligibility=eligibility,
    cost=grid_cost,
)
