"""What an explanation costs, from the rows' own timings: the table behind the report's cost section and its
faithfulness-vs-cost plot (the counters themselves: :mod:`faithbench.bench.run.counters`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.order import is_control, method_colour, method_order, metric_order
from faithbench.bench.report.style import method_marker, save, side_legend
from faithbench.bench.store.results import contestants


def _beaten(results: pd.DataFrame) -> pd.DataFrame:
    """Per metric and method: the share of the model's other methods it beats on the metric (1: best, 0: worst;
    ties count half), the mean over the models. Shares, unlike scores, compare across models and their chance
    levels."""
    part = contestants(results)
    part = part[np.isfinite(part["mean"])]
    signed = part["mean"].where(part["higher_is_better"].astype(bool), -part["mean"])
    groups = signed.groupby([part["model"], part["metric"]])
    n = groups.transform("size")
    share = ((groups.rank(method="average") - 1) / (n - 1)).where(n > 1)
    frame = part.assign(share=share).dropna(subset=["share"])
    return frame.groupby(["metric", "method"], sort=False)["share"].agg(["mean", "size"]).reset_index()


def cost_plot(results: pd.DataFrame, out: Path, plt: Any) -> Path | None:
    """``faithfulness_vs_cost.png``: per metric, each method's share of the other methods it beats (mean over the
    models) against its seconds per explained input (median over the models, log scale): one point per method, in
    its colour and marker, so which methods buy their faithfulness with compute reads at a glance."""
    cost = explanation_cost(results)
    if cost.empty:
        return None
    seconds = cost[~cost["method"].map(is_control)].groupby("method")["s_per_input"].median()
    beaten = _beaten(results)
    beaten = beaten[beaten["method"].isin(seconds.index)]
    metrics = [m for m in metric_order(results["metric"]) if (beaten["metric"] == m).any()]
    if not metrics:
        return None
    methods = method_order(beaten["method"])
    n_cols = min(4, len(metrics))
    n_rows = -(-len(metrics) // n_cols)
    legend_in = 2.3
    fig, axes = plt.subplots(
        n_rows,
        n_cols,
        figsize=(3.35 * n_cols + legend_in, 2.7 * n_rows + 0.7),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    higher = results.drop_duplicates("metric").set_index("metric")["higher_is_better"].astype(bool)
    for ax, metric in zip(axes.flat, metrics, strict=False):
        part = beaten[beaten["metric"] == metric].set_index("method")
        for method in methods:
            if method in part.index:
                ax.scatter(
                    seconds[method],
                    part.loc[method, "mean"],
                    s=55,
                    color=method_colour(method),
                    marker=method_marker(method),
                    edgecolors="#333333",
                    linewidths=0.5,
                    label=method.replace("_", " "),
                    zorder=3,
                )
        ax.set_xscale("log")
        ax.set_ylim(-0.08, 1.08)
        ax.grid(alpha=0.3, linewidth=0.6)
        ax.set_title(f"{metric.replace('_', ' ')} ({'↑' if higher[metric] else '↓'})", fontsize=9.5)
        ax.tick_params(labelsize=8)
    for k, ax in enumerate(axes.flat):
        if k >= len(metrics):
            ax.set_visible(False)
        elif k + n_cols >= len(metrics):  # the lowest panel of its column
            ax.set_xlabel("s per explained input", fontsize=8.5)
            ax.xaxis.set_tick_params(labelbottom=True)
    for row in axes:
        row[0].set_ylabel("share beaten", fontsize=8.5)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in list(axes.flat)[1 : len(metrics)]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    order = [labels.index(m.replace("_", " ")) for m in methods if m.replace("_", " ") in labels]
    fig.suptitle(
        "faithfulness against cost, one point per method: the share of the model's other methods it beats on the "
        "metric (1: best on every model; mean over the models)\nagainst its seconds per explained input (median over "
        "the models; this run's device and batch size)",
        fontsize=10.5,
        x=0.01,
        ha="left",
    )
    right = 1 - legend_in / fig.get_figwidth()
    side_legend(fig, [handles[i] for i in order], [labels[i] for i in order], legend_in,
                rect=(0, 0, right, 1 - 0.2 / fig.get_figheight()))  # fmt: skip
    return save(fig, out / "faithfulness_vs_cost.png", plt)


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
