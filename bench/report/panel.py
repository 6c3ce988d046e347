"""The report's example panel: the input and every (model, method)'s map of it, drawn from the example maps the run
saved (:mod:`faithbench.bench.store.examples`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.report.order import method_order, model_order
from faithbench.bench.report.style import WIDTH_IN, save
from faithbench.bench.store.examples import read_examples
from faithbench.bench.store.results import contestants

ALL_ZERO = "all zero"  # a map without a single non-zero value would draw as a blank square: say so instead


def example_panel(run_dir: Path, results: pd.DataFrame, out: Path, plt: Any) -> Path | None:
    """``example_maps.png``: a row per model, a column per method (the report's orders), each map on its own
    symmetric colour scale (red +, blue -); "n/a" where the method does not apply, "all zero" for an empty map."""
    try:
        units = json.loads((run_dir / "run.json").read_text()).get("units", [])
    except (OSError, json.JSONDecodeError):
        return None
    shown = set(contestants(results)[["model", "method"]].itertuples(index=False, name=None))
    keys = {(u["model"], u["method"]): u["key"] for u in units if (u.get("model"), u.get("method")) in shown}
    examples = read_examples(run_dir, keys)
    if not examples:
        return None
    models = [m for m in model_order(results) if any(k[0] == m for k in examples)]
    methods = method_order(m for _, m in examples)
    n_cols = len(methods) + 1
    cell = min(1.1, (WIDTH_IN - 1.6) / n_cols)  # inches per map: the row fits the report's width
    top = 0.7  # inches for the caption and the column titles (two lines) above the maps
    fig, axes = plt.subplots(
        len(models), n_cols, figsize=(cell * n_cols + 1.6, cell * len(models) * 1.08 + 0.35 + top), squeeze=False
    )
    fig.subplots_adjust(
        left=1.6 / fig.get_figwidth(),
        right=0.995,
        bottom=0.01,
        top=1 - top / fig.get_figheight(),
        wspace=0.06,
        hspace=0.08,
    )
    first = next(iter(examples.values()))
    img = first["image"]
    fontsize = 8 if cell >= 0.9 else 7
    for i, model in enumerate(models):
        axes[i, 0].imshow(img.permute(1, 2, 0).squeeze(-1), cmap="gray" if img.shape[0] == 1 else None)
        axes[i, 0].set_ylabel(model, fontsize=fontsize, rotation=0, ha="right", va="center")
        for j, method in enumerate(methods, start=1):
            ax = axes[i, j]
            example = examples.get((model, method))
            if example is None:
                ax.text(0.5, 0.5, "n/a", ha="center", va="center", fontsize=fontsize, color="#aaaaaa")
                for side in ax.spines.values():
                    side.set_visible(False)
                continue
            amap = example["map"]
            lim = float(amap.abs().max())
            ax.imshow(amap, cmap="bwr", vmin=-(lim or 1.0), vmax=lim or 1.0, interpolation="nearest")
            if lim == 0:
                ax.text(0.5, 0.5, ALL_ZERO, ha="center", va="center", fontsize=fontsize, transform=ax.transAxes)
    for j, title in enumerate(["input", *methods]):
        axes[0, j].set_title(textwrap.fill(title.replace("_", " "), 11), fontsize=fontsize)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        f"{first['caption']}: red +, blue -, each map on its own scale", fontsize=10, y=1 - 0.12 / fig.get_figheight()
    )
    return save(fig, out / "example_maps.png", plt)
