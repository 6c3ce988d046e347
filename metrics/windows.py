"""Explaining a large image (a GridPG grid) in one pass or with sliding windows.

Models with a fixed input geometry (ViTs) are explained on grids through windows of one cell,
stride half a cell, folded back into one map per target (B-cosification sums the window maps over
a zero-padded grid; ALOE averages them by how many windows cover a pixel, without padding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.errors import check_choice

WINDOW_RULES = ("none", "sum-padded", "mean-unpadded")

ExplainFn = Callable[[Tensor, Tensor], Tensor]
"""``explain(inputs (n, C, H, W), targets (n,)) -> maps (n, H, W) or (n, C, H, W)``."""


def explain_grids(
    explain: ExplainFn,
    grids: Tensor,
    targets: Tensor,
    *,
    grid_size: int,
    windows: str = "none",
    chunk_size: int = 64,
) -> Tensor:
    """Maps (G, T, H, W) of every target's class on its grid (targets (G, T)).

    ``windows="none"`` explains each whole grid in one pass; ``sum-padded`` / ``mean-unpadded``
    explain cell-size windows at stride half a cell (see :func:`sliding_window_maps`).
    """
    check_choice(windows, "window rule", WINDOW_RULES)
    if grids.dim() != 4 or not grids.is_floating_point():
        raise ValueError(f"grids must be floating-point (G, C, H, W), got {tuple(grids.shape)} {grids.dtype}")
    g, _, h, w = grids.shape
    if windows != "none":
        cell = h // grid_size
        return sliding_window_maps(
            explain,
            grids,
            targets,
            window=cell,
            stride=cell // 2,
            padding=cell // 2 if windows == "sum-padded" else 0,
            fold="sum" if windows == "sum-padded" else "mean",
            chunk_size=chunk_size,
        )
    t = targets.shape[1]
    g_idx = torch.arange(g, device=grids.device).repeat_interleave(t)
    maps = explain_in_chunks(explain, lambda s: grids[g_idx[s]], targets.reshape(-1), chunk_size)
    return maps.reshape(g, t, h, w)


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
    # Job j explains window (g, l) for target (g, t); jobs ordered (g, l, t), so that the targets of one
    # window are explained together (methods that share model calls between equal inputs, such as LIME).
    g_idx = torch.arange(g, device=grids.device).repeat_interleave(n_win * t)
    l_idx = torch.arange(n_win, device=grids.device).repeat_interleave(t).repeat(g)
    job_targets = targets.unsqueeze(1).expand(g, n_win, t).reshape(-1)
    maps = explain_in_chunks(explain, lambda s: windows[g_idx[s], l_idx[s]], job_targets, chunk_size)
    maps = maps.reshape(g, n_win, t, window * window).permute(0, 2, 3, 1).reshape(g * t, window * window, n_win)
    folded = F.fold(maps, (hp, wp), window, stride=stride)
    if fold == "mean":
        ones = torch.ones(1, window * window, n_win, dtype=maps.dtype, device=maps.device)
        coverage = F.fold(ones, (hp, wp), window, stride=stride)
        if bool((coverage[..., padding : padding + h, padding : padding + w] == 0).any()):
            raise ValueError("sliding windows leave some grid pixels uncovered")
        folded = folded / coverage.clamp(min=1)
    return folded[:, 0, padding : padding + h, padding : padding + w].reshape(g, t, h, w)


def explain_in_chunks(
    explain: ExplainFn, inputs_for: Callable[[slice], Tensor], targets: Tensor, chunk_size: int
) -> Tensor:
    """Call ``explain`` on job slices of at most ``chunk_size`` and concatenate channel-summed maps."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")

    def chunk(start: int, stop: int) -> Tensor:
        maps = explain(inputs_for(slice(start, stop)), targets[start:stop])
        return maps.sum(dim=1) if maps.dim() == 4 else maps

    return torch.cat(in_chunks(chunk, targets.shape[0], chunk_size))
