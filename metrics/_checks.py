"""Input validation shared by the metrics: every error names the argument and what was expected."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

import torch
from torch import Tensor

from faithbench.errors import check_choice  # noqa: F401 - re-exported for the metric modules

C = TypeVar("C")


def check_tensor(x: object, name: str, *, min_dim: int = 1, floating: bool = False) -> Tensor:
    """Check ``x`` is a tensor with at least ``min_dim`` dimensions (and floating point if asked)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, got shape {tuple(x.shape)}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch (shape {tuple(x.shape)})")
    return x


def check_finite(x: Tensor, name: str) -> None:
    """Reject NaN/inf values, saying how many there are and in which samples."""
    if not x.is_floating_point():
        return
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        per_sample = bad.reshape(x.shape[0], -1).any(dim=1).nonzero().flatten()
        shown = per_sample[:8].tolist()
        more = "" if per_sample.numel() <= 8 else f" (and {per_sample.numel() - 8} more)"
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN/inf values, in batch samples {shown}{more}; "
            "attributions must be finite (check the explanation method's output)"
        )


def check_targets(targets: Tensor, batch: int, name: str = "targets") -> Tensor:
    """Targets: integer tensor of shape (batch,)."""
    check_tensor(targets, name)
    if targets.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"{name} must be an integer tensor of class indices, got dtype {targets.dtype}")
    if targets.shape != (batch,):
        raise ValueError(f"{name} must have shape ({batch},) to match the batch, got {tuple(targets.shape)}")
    return targets.long()


def check_fractions(fractions: Sequence[float], name: str = "fractions", *, allow_zero: bool) -> Tensor:
    """Fractions: a non-empty, strictly increasing sequence in [0, 1] (or (0, 1])."""
    values = torch.as_tensor(list(fractions), dtype=torch.float64)
    if values.dim() != 1 or values.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of numbers, got {list(fractions)!r}")
    low_ok = (values >= 0) if allow_zero else (values > 0)
    if not bool((low_ok & (values <= 1)).all()):
        bound = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"{name} must lie in {bound}, got {values.tolist()}")
    if values.numel() > 1 and not bool((values[1:] > values[:-1]).all()):
        raise ValueError(f"{name} must be strictly increasing, got {values.tolist()}")
    return values


def check_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


BLOCKS_PER_SIDE = 14  # the default block is the image side / 14: 2 px on 28 px digits, 16 px on 224 px (ALOE's)
MIN_BLOCKS = 8  # fewer blocks than this leave a curve of a few steps: a suite refuses such a block size


def block_size_for(height: int, width: int, block_size: int | None) -> int:
    """``block_size``, or for None the data-derived default max(1, min(H, W) // 14)."""
    if block_size is None:
        return max(1, min(height, width) // BLOCKS_PER_SIDE)
    return check_positive_int(block_size, "block_size")


def check_block_count(side: int, block_size: int) -> None:
    """Refuse a block size that cuts a ``side`` px square image into fewer than :data:`MIN_BLOCKS` blocks."""
    per_side = -(-side // block_size)
    n = per_side * per_side
    if n < MIN_BLOCKS:
        raise ValueError(
            f"block_size {block_size} cuts the {side} px images into {n} block(s), fewer than {MIN_BLOCKS}: a curve of "
            f"a few steps; use block_size <= {max(1, (side - 1) // 2)} or leave it out (the default for {side} px: "
            f"{block_size_for(side, side, None)})"
        )


def resolve_block(config: C, side: int) -> C:
    """A config with a ``block_size`` (None: the default) on ``side`` px images: the block filled in and checked."""
    block: Any = block_size_for(side, side, config.block_size)  # type: ignore[attr-defined]
    check_block_count(side, block)
    return replace(config, block_size=block)  # type: ignore[type-var]
