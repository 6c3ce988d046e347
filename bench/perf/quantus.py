"""The quantities of ``python -m bench perf`` that Quantus 0.6.0 also defines, paired with faithbench's.

Each :class:`Paired` computes one quantity twice: faithbench on all images of the batch, Quantus on
the first ``n_quantus`` (Quantus loops over samples in NumPy). The parameter correspondences are the
ones ``tests/metrics/test_quantus_differential.py`` establishes:

* pixel deletion, b = 1, fractions ``j s / (H W)``  =  ``PixelFlipping(features_in_step=C s)``: the
  curve after each step (Quantus flips (channel, pixel) entries; with the map broadcast over the C
  channels the C copies of a pixel are adjacent in its ranking, so steps of C s entries are s pixels);
* block deletion, fractions ``j / n_blocks``, j = 0..R  =  ``RegionPerturbation(patch_size=b,
  regions_evaluation=R, order="morf")``: ``p(x) - p(x without the top j blocks)``, j = 1..R;
* a GridPG cell  =  ``RelevanceMassAccuracy`` of the positive part with the cell as mask;
* ``explanation_entropy``  =  ``Complexity(abs=True, normalise=False)``;
* ``gini_index``  =  ``Sparseness(abs=True, normalise=False)``, which adds 1e-7 to every |a_i|;
* ``effective_complexity``  =  ``EffectiveComplexity`` normalised per map (``normalise_axes=[1, 2, 3]``);
* ``consistency`` (its default ``top_n_sign``, maps normalised per map and made positive, the predictions of one
  forward pass in the timed call)  =  ``Consistency(abs=True)`` normalised per map, which predicts the classes
  itself; it compares the samples of its call (its ``n_quantus`` images), so the agreement is faithbench's on those
  images alone, a sample no other shares its explanation with scored 0 as Quantus does (faithbench: undefined).

Every curve uses the softmax and a baseline of 0 in model-input space on both sides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType

import numpy as np
import torch
from torch import Tensor, nn

from faithbench.metrics import explanation_entropy, gini_index, grid_pointing_game, pixel_deletion
from faithbench.metrics.complexity import effective_complexity
from faithbench.metrics.consistency import consistency

RTOL, ATOL = 1e-4, 1e-6  # per-sample agreement needed before a Quantus timing counts
SPARSENESS_OFFSET = 1e-7  # Quantus Sparseness adds this to every |a_i|
PER_MAP = {"normalise_axes": [1, 2, 3]}  # Quantus' normalise_by_max over one map (its default: the call batch's)


@dataclass(frozen=True)
class Paired:
    """One quantity computed by faithbench and by Quantus.

    ``faithbench()`` returns the per-sample values of all ``n_images`` in Quantus' layout;
    ``quantus()`` those of the first ``n_quantus``; ``check()`` (default: ``faithbench()`` cut to
    ``n_quantus``) is what must agree with Quantus.
    """

    what: str
    faithbench: Callable[[], Tensor]
    quantus: Callable[[], object]
    n_images: int
    n_quantus: int
    uses_model: bool
    note: str
    check: Callable[[], Tensor] | None = None


def _values(metric: Callable, maps: Tensor) -> Tensor:
    return metric(maps).values


def _map_only(metric: type, args: dict) -> object:
    """Quantus' map-only ``metric`` on the maps, absolute and unnormalised as faithbench's (built in the timed call)."""
    return metric(abs=True, normalise=False, disable_warnings=True)(**args)


def import_quantus() -> tuple[ModuleType | None, str]:
    """The ``quantus`` module, or None and a note saying why its rows are skipped."""
    try:
        import quantus
    except Exception as exc:  # noqa: BLE001 - any import failure (missing, broken numpy) skips the rows
        return None, f"quantus is not importable ({type(exc).__name__}: {exc}): Quantus rows skipped"
    return quantus, ""


def agreement(ours: Tensor, theirs: object) -> tuple[bool, float]:
    """Whether faithbench's and Quantus' per-sample values agree (rtol 1e-4, atol 1e-6), and the largest gap."""
    a = ours.detach().double().cpu().numpy()
    b = np.asarray(theirs, dtype=float)
    if a.shape != b.shape:
        return False, math.nan
    gap = float(np.abs(a - b).max()) if a.size else 0.0
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL)), gap


def flip_steps(n_pixels: int, channels: int, wanted: int) -> int | None:
    """The smallest number of PixelFlipping steps >= ``wanted`` that flips whole pixels: Quantus needs
    ``features_in_step`` (C x pixels per step) to divide H x W, so C must divide the number of steps
    and the steps must divide H x W. None if there is none (e.g. RGB at 224 px: 3 does not divide 224²)."""
    for steps in range(max(1, wanted), n_pixels + 1):
        if steps % channels == 0 and n_pixels % steps == 0:
            return steps
    return None


def paired_quantities(
    quantus: ModuleType,
    module: nn.Module,
    inputs: Tensor,
    maps: Tensor,
    grid_maps: Tensor,
    targets: Tensor,
    *,
    block_size: int,
    steps: int,
    regions: int,
    n_quantus: int,
    chunk_size: int,
) -> tuple[list[Paired], list[str]]:
    """The paired quantities of one model and the notes on those Quantus cannot express at these sizes.

    Args:
        inputs: (B, C, H, W) model inputs; maps: (B, H, W) attribution maps; targets: (B,).
        grid_maps: (G, 4, 2H, 2W) maps of 2 x 2 grids, map t explaining cell t (column-major).
        block_size: RegionPerturbation's patch size (must divide H and W: Quantus pads, faithbench
            averages border blocks). steps / regions: PixelFlipping steps (rounded up to a count that
            flips whole pixels) and RegionPerturbation regions.
    """
    b, c, h, w = inputs.shape
    nq = min(n_quantus, b)
    x_q, a_q, y_q = inputs[:nq].cpu().numpy(), maps[:nq, None].cpu().numpy(), targets[:nq].cpu().numpy()

    def q_args(x: np.ndarray, a: np.ndarray, y: np.ndarray) -> dict:
        dev = str(inputs.device)
        return dict(model=module, x_batch=x, y_batch=y, a_batch=a, channel_first=True, device=dev, batch_size=len(x))

    def deletion(block: int, fractions: list[float]) -> Tensor:
        return pixel_deletion(
            module,
            inputs,
            maps,
            targets,
            block_size=block,
            fractions=fractions,
            activation="softmax",
            chunk_size=chunk_size,
        ).curve

    map_args = q_args(a_q.copy(), a_q, y_q)  # the map-only metrics never call the model (0 model calls)
    out, notes = [], []
    n_steps = flip_steps(h * w, c, steps)
    if n_steps is None:
        notes.append(f"no PixelFlipping row: no step count flips whole pixels of {c} channels at {h}x{w}")
    else:
        s = h * w // n_steps
        flips = [j * s / (h * w) for j in range(n_steps + 1)]
        out.append(
            Paired(
                "deletion (PixelFlipping)",
                lambda: deletion(1, flips)[:, 1:],
                lambda: quantus.PixelFlipping(
                    features_in_step=c * s, perturb_baseline=0.0, abs=False, normalise=False, disable_warnings=True
                )(**q_args(x_q, a_q, y_q), softmax=True),
                b,
                nq,
                True,
                f"pixels, {n_steps} steps of {s}",
            )
        )
    if h % block_size or w % block_size:
        notes.append(f"no RegionPerturbation row: block size {block_size} does not divide {h}x{w}")
    else:
        n_blocks = (h // block_size) * (w // block_size)
        r = min(regions, n_blocks)
        fractions = [j / n_blocks for j in range(r + 1)]

        def region_drop() -> Tensor:
            curve = deletion(block_size, fractions)
            return curve[:, :1] - curve[:, 1:]

        out.append(
            Paired(
                "deletion (RegionPerturbation)",
                region_drop,
                lambda: quantus.RegionPerturbation(
                    patch_size=block_size,
                    order="morf",
                    regions_evaluation=r,
                    perturb_baseline=0.0,
                    abs=False,
                    normalise=False,
                    disable_warnings=True,
                )(**q_args(x_q, a_q, y_q), softmax=True),
                b,
                nq,
                True,
                f"{r} of {n_blocks} blocks of {block_size}px",
            )
        )

    g, t, gh, gw = grid_maps.shape
    nq_cells = min(n_quantus, g * t)
    positive = grid_maps.reshape(g * t, 1, gh, gw)[:nq_cells].clamp(min=0).cpu().numpy()
    masks = np.zeros_like(positive)
    for k in range(nq_cells):
        row, col = (k % t) % 2, (k % t) // 2  # column-major 2 x 2 tiling
        masks[k, :, row * gh // 2 : (row + 1) * gh // 2, col * gw // 2 : (col + 1) * gw // 2] = 1
    y_cells = np.zeros(nq_cells, dtype=np.int64)
    out.append(
        Paired(
            "grid_pointing_game",
            lambda: grid_pointing_game(grid_maps, 2).values.reshape(-1),
            lambda: quantus.RelevanceMassAccuracy(abs=False, normalise=False, disable_warnings=True)(
                **q_args(positive.copy(), positive, y_cells), s_batch=masks
            ),
            g * t,
            nq_cells,
            False,
            f"{g} 2x2 grids of {gh}px, one map per cell; Quantus gets A+ and the cell masks precomputed",
        )
    )
    map_only = (  # (what, ours, Quantus' class, note, what must agree): neither calls the model
        ("explanation_entropy", explanation_entropy, quantus.Complexity, "pixel maps", None),
        ("gini_index", gini_index, quantus.Sparseness, "pixel maps; agreement checked with Quantus' 1e-7 offset",
         lambda: gini_index(maps[:nq].double().abs() + SPARSENESS_OFFSET).values),
    )  # fmt: skip
    for what, ours, theirs, note, check in map_only:
        out.append(
            Paired(what, partial(_values, ours, maps), partial(_map_only, theirs, map_args), b, nq, False, note, check)
        )
    out.append(
        Paired(
            "effective_complexity",
            partial(_values, effective_complexity, maps),
            lambda: quantus.EffectiveComplexity(normalise_func_kwargs=PER_MAP, disable_warnings=True)(**map_args),
            b,
            nq,
            False,
            "pixel maps; Quantus normalised per map (normalise_axes), as faithbench",
        )
    )

    def predicted(x: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([module(x[s : s + chunk_size]).argmax(dim=1) for s in range(0, len(x), chunk_size)])

    out.append(
        Paired(
            "consistency",
            lambda: consistency(maps, predicted(inputs)).values,
            lambda: quantus.Consistency(abs=True, normalise_func_kwargs=PER_MAP, disable_warnings=True)(
                **q_args(x_q, a_q, y_q)
            ),
            b,
            nq,
            True,
            "top_n_sign of the first 5 entries, maps normalised per map, the predictions of one forward pass; "
            "compared within the batch (Quantus: within its n_quantus images)",
            lambda: consistency(maps[:nq], predicted(inputs[:nq])).values.nan_to_num(nan=0.0),
        )
    )
    return out, notes
