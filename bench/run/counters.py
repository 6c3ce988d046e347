"""What a unit costs besides wall time: model calls, inputs the model saw, peak device memory (the report's
cost section and plot: :mod:`faithbench.bench.report.cost`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class Cost:
    """Outermost forward calls of a model (a call of a sub-module inside another call is not counted; a
    sub-module called on its own is: ``native_normalised`` runs layer 0 and then the remaining layers of a
    B-cosified ``Sequential`` one by one, so each counts), the inputs they carried (the first dimension
    of the call's output: Captum's DeepLift passes inputs and baselines as separate arguments that a
    hook joins), and the peak device memory in MiB (CUDA only; NaN on the CPU, where torch keeps no
    allocator statistics). Work a model's units share (the grid selection of a grid metric, the
    predicted classes) is paid by the unit that runs first."""

    model_calls: int = 0
    model_inputs: int = 0
    peak_memory_mb: float = math.nan


@contextlib.contextmanager
def measuring(module: nn.Module, device: torch.device) -> Iterator[Cost]:
    """Count ``module``'s forward calls and the peak memory on ``device`` inside the block."""
    cost, depth = Cost(), [0]

    def enter(*_: Any) -> None:
        if depth[0] == 0:
            cost.model_calls += 1
        depth[0] += 1

    def leave(_: nn.Module, args: tuple, output: Any) -> None:
        depth[0] -= 1
        if depth[0] == 0:
            out = output[0] if isinstance(output, tuple | list) and output else output
            cost.model_inputs += int(out.shape[0]) if isinstance(out, torch.Tensor) and out.dim() else 1

    hooks = []
    for m in module.modules():
        hooks.append(m.register_forward_pre_hook(enter))
        hooks.append(m.register_forward_hook(leave, always_call=True))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    try:
        yield cost
    finally:
        for hook in hooks:
            hook.remove()
        if cuda:
            torch.cuda.synchronize(device)
            cost.peak_memory_mb = torch.cuda.max_memory_allocated(device) / 2**20
