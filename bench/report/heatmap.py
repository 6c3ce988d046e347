"""A metric's scores as a model x method heatmap with the value written in every cell: the methods in the report's
order, the controls set apart in grey on the right, the uniform control named as the chance level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.order import is_control, method_order, model_order
from faithbench.bench.report.statistics_section import LeaderboardStats
from faithbench.bench.report.style import WIDTH_IN, axis_label, better, number, save

# Maps that say nothing: where the two score alike on every model, that score is the metric's chance level (a pointing
# game's 1/n); where they differ (an order of removal, a spread) the metric has no single chance level.
CHANCE, NOISE = "uniform", "random"


def _marks(stats: LeaderboardStats | None, metric: str) -> dict[tuple[str, str], str]:
    """(model, method) -> ★ for the best method of the model, ✗ where a method is not significantly better than the
    random control (the leaderboard's and the skill table's marks)."""
    marks: dict[tuple[str, str], str] = {}
    if stats is None:
        return marks
    if not stats.table.empty:
        best = stats.table[(stats.table["metric"] == metric) & stats.table["best"].astype(bool)]
        marks.update({(m, k): "★" for m, k in zip(best["model"], best["method"], strict=True)})
    if not stats.skill.empty:
        skill = stats.skill[(stats.skill["metric"] == metric) & ~stats.skill["beats_random"].astype(bool)]
        for model, method in zip(skill["model"], skill["method"], strict=True):
            if not is_control(method):
                marks[(model, method)] = marks.get((model, method), "") + "✗"
    return marks


def _chance(grid: pd.DataFrame) -> list[float]:
    """The uniform control's score per model where it is the chance level (see :data:`CHANCE`), else []."""
    if CHANCE not in grid or NOISE not in grid:
        return []
    both = grid[[CHANCE, NOISE]].dropna()
    if both.empty or not np.allclose(both[CHANCE], both[NOISE], rtol=1e-3, atol=1e-9):
        return []
    return list(both[CHANCE])


def _text_colour(rgba: tuple[float, ...]) -> str:
    luminance = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2]
    return "black" if luminance > 0.55 else "white"


def _draw(ax: Any, grid: pd.DataFrame, cmap: Any, norm: Any, span: float, marks: dict, fontsize: float) -> None:
    values = grid.to_numpy(dtype=float)
    ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    ax.set_facecolor("#f4f4f4")  # no score: the method does not apply to the model
    for i, model in enumerate(grid.index):
        for j, method in enumerate(grid.columns):
            v = values[i, j]
            colour = _text_colour(cmap(norm(v))) if np.isfinite(v) else "#999999"
            text = number(v, span) + marks.get((model, method), "")
            ax.text(j, i, text, ha="center", va="center", fontsize=fontsize, color=colour)
    ax.set_xticks(range(len(grid.columns)), [c.replace("_", " ") for c in grid.columns], rotation=35, ha="right")
    ax.set_yticks(range(len(grid.index)), grid.index)
    ax.tick_params(length=0, labelsize=9)
    ax.set_xticks(np.arange(len(grid.columns) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(grid.index) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    for side in ax.spines.values():
        side.set_visible(False)


def score_heatmap(
    results: pd.DataFrame, metric: str, out: Path, plt: Any, stats: LeaderboardStats | None = None
) -> Path | None:
    """``<metric>.png``: the mean score of every (model, method), darker is better whatever the metric's direction;
    the controls in their own grey block on the right (the uniform control's column is the chance level)."""
    part = results[results["metric"] == metric]
    if part.empty:
        return None
    grid = part.pivot_table(index="model", columns="method", values="mean", aggfunc="first")
    models = [m for m in model_order(part) if m in grid.index]
    order = method_order(grid.columns)
    methods = [m for m in order if not is_control(m)]
    controls = [m for m in order if is_control(m)]
    higher = bool(part["higher_is_better"].iloc[0])
    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    norm = plt.Normalize(lo, hi if hi > lo else lo + 1)
    # Darker is better in either direction; the controls' greys stop short of white so their block stays visible.
    greys = plt.matplotlib.colors.ListedColormap(plt.get_cmap("Greys")(np.linspace(0.12, 0.85, 256)))
    cmaps = [plt.get_cmap("YlGn" if higher else "YlGn_r"), greys if higher else greys.reversed()]
    span = max(abs(lo), abs(hi))
    marks = _marks(stats, metric)

    n_cols = len(methods) + len(controls)
    cell = min(0.78, (WIDTH_IN - 3.4) / max(n_cols + 0.6, 1))  # room left for the model names and the colour bar
    fontsize = 8.5 if cell >= 0.62 else 7
    blocks = [(b, cm) for b, cm in ((methods, cmaps[0]), (controls, cmaps[1])) if b]
    height = 0.36 * len(models) + 2.4
    fig, axes = plt.subplots(
        1,
        len(blocks),
        figsize=(cell * n_cols + 3.0, height),
        squeeze=False,
        gridspec_kw={"width_ratios": [len(b) for b, _ in blocks], "wspace": 0.6 / max(n_cols, 1) * len(blocks)},
    )
    fig.subplots_adjust(top=1 - 0.9 / height, bottom=1.15 / height)
    chance = _chance(grid.reindex(index=models))
    for k, (ax, (block, cmap)) in enumerate(zip(axes[0], blocks, strict=True)):
        _draw(ax, grid.reindex(index=models, columns=block), cmap, norm, span, marks, fontsize)
        if block is controls:
            ax.set_title("controls", fontsize=9, color="#555555")
            labels = ax.get_xticklabels()
            for label, name in zip(labels, block, strict=True):
                if name == CHANCE and chance:
                    label.set_text("uniform = chance")
                    label.set_fontweight("bold")
            ax.set_xticklabels(labels)
        elif len(blocks) > 1:
            ax.set_title("methods", fontsize=9, color="#555555")
        if k > 0:
            ax.set_yticks([])
    bar = fig.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=cmaps[0]), ax=list(axes[0]), fraction=0.025, pad=0.015, aspect=25
    )
    bar.set_label(axis_label(metric, part["unit"].iloc[0]), fontsize=9)
    bar.ax.tick_params(labelsize=8)
    notes = [f"{axis_label(metric, part['unit'].iloc[0])}: mean per model and method, {better(higher)} (darker)"]
    if chance:
        levels = " / ".join(dict.fromkeys(number(v, span) for v in chance))
        notes.append(f"chance level (the uniform and the random map score alike): {levels}")
    if marks:
        notes.append("★ best method of the model, ✗ not significantly better than the random control")
    fig.text(0.01, 1 - 0.22 / height, notes[0], fontsize=11, ha="left", va="center")
    if len(notes) > 1:
        fig.text(0.01, 1 - 0.5 / height, "; ".join(notes[1:]), fontsize=9, color="#444444", ha="left", va="center")
    return save(fig, out / f"{metric}.png", plt)
