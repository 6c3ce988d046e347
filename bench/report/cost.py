"""What an explanation costs, from the rows' own timings: the report's cost section and its
faithfulness-vs-cost plot (the counters themselves: :mod:`faithbench.bench.run.cost`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


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
