"""What a unit costs besides wall time: model calls, inputs the model saw, peak device memory; and the
report's faithfulness-vs-cost plot."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
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


def cost_plot(results: pd.DataFrame, out: Path, plt: Any, sns: Any) -> Path | None:
    """Each metric's mean score against the unit's explanation time (log scale), one point per (model,
    method): which methods buy their faithfulness with compute."""
    part = results[results["explain_time_s"].notna() & (results["explain_time_s"] > 0)]
    if part.empty:
        return None
    metrics = list(dict.fromkeys(part["metric"]))
    grid = sns.relplot(
        data=part,
        x="explain_time_s",
        y="mean",
        hue="method",
        style="model",
        col="metric",
        col_wrap=min(3, len(metrics)),
        height=3.0,
        facet_kws={"sharey": False},
    )
    for ax, metric in zip(grid.axes.flat, metrics, strict=False):
        ax.set_xscale("log")
        row = part[part["metric"] == metric].iloc[0]
        arrow = "higher" if bool(row["higher_is_better"]) else "lower"
        ax.set_title(f"{metric} ({arrow} is better)")
    grid.set_axis_labels("explanation time of the unit [s]", "mean score")
    path = out / "faithfulness_vs_cost.png"
    grid.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(grid.figure)
    return path


def explanation_cost(results: pd.DataFrame, reference: str = "native") -> pd.DataFrame:
    """Seconds per explained input of every (model, method), from the rows whose time is that of the per-sample
    explanations (``explained`` = ``samples...``: the unit's time over its samples; the least over such rows),
    and the ratio to ``reference`` on the same model (B-cos LM Tab. 4 compares W(x)x with LIME and Shapley)."""
    if "explained" not in results:
        return pd.DataFrame()
    part = results[results["explained"].astype(str).str.startswith("samples") & (results["explain_time_s"] > 0)]
    if part.empty:
        return pd.DataFrame()
    per_input = part["explain_time_s"] / (part["n"] + part["n_dropped"]).clip(lower=1)
    table = part.assign(s_per_input=per_input).groupby(["model", "method"], sort=False)["s_per_input"].min()
    table = table.reset_index()
    ref = table[table["method"] == reference].set_index("model")["s_per_input"]
    table[f"x_{reference}"] = table["s_per_input"] / table["model"].map(ref)
    return table.sort_values(["model", "s_per_input"], kind="stable").reset_index(drop=True)


def cost_section(results: pd.DataFrame, markdown: bool, fmt: Any) -> str:
    """The report's section on what an explanation costs (``fmt``: the table formatter)."""
    table = explanation_cost(results)
    if table.empty:
        return ""
    shown = table.assign(
        s_per_input=table["s_per_input"].map(lambda v: f"{v:.4f}"),
        x_native=table["x_native"].map(lambda v: "–" if v != v else f"{v:.1f}x"),
    )
    head = "### Cost of an explanation\n\n" if markdown else "cost of an explanation\n"
    note = (
        "Seconds per explained input (the per-sample explanations of each unit, on this run's device and batch "
        "size), and the ratio to the native W(x)x of the same model."
    )
    return f"{head}{note}\n\n" + fmt(shown).rstrip("\n")
