"""Positive-mass share of a target region: the core of both pointing games (GridPG, SeqPG)."""

from __future__ import annotations

import torch
from torch import Tensor


def target_share(region_mass: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    """Share of the total mass that falls in the target region.

    ``share_b = region_mass[b, target_b] / sum_r region_mass[b, r]`` for masses (B, R) >= 0 and
    targets (B,). Returns ``(share, zero_mass)``; where the total is exactly 0 the share is NaN
    and ``zero_mass`` is True (callers apply their protocol's convention to those samples).
    """
    total = region_mass.sum(dim=1)
    own = region_mass.gather(1, target.unsqueeze(1)).squeeze(1)
    zero_mass = total <= 0
    share = torch.where(zero_mass, torch.full_like(own, float("nan")), own / torch.where(zero_mass, 1, total))
    return share, zero_mass
