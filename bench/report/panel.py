"""The report's example panel: the input and every (model, method)'s map of it, drawn from the example maps the run
saved (:mod:`faithbench.bench.run.examples`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.run.examples import read_examples
from faithbench.bench.run.results import contestants


def example_panel(run_dir: Path, results: pd.DataFrame, out: Path, plt: Any) -> Path | None:
    try:
        units = json.loads((run_dir / "run.json").read_text()).get("units", [])
    except (OSError, json.JSONDecodeError):
        return None
    shown = set(contestants(results)[["model", "method"]].itertuples(index=False, name=None))
    keys = {(u["model"], u["method"]): u["key"] for u in units if (u.get("model"), u.get("method")) in shown}
    examples = read_examples(run_dir, keys)
    if not examples:
        return None
    models = [m for m in dict.fromkeys(results["model"]) if any(k[0] == m for k in examples)]
    methods = [m for m in dict.fromkeys(results["method"]) if any(k[1] == m for k in examples)]
    fig, axes = plt.subplots(
        len(models), len(methods) + 1, figsize=(1.5 * (len(methods) + 1), 1.6 * len(models)), squeeze=False
    )
    first = next(iter(examples.values()))
    img = first["image"]
    for i, model in enumerate(models):
        axes[i, 0].imshow(img.permute(1, 2, 0).squeeze(-1), cmap="gray" if img.shape[0] == 1 else None)
        axes[i, 0].set_ylabel(model, fontsize=7)
        for j, method in enumerate(methods, start=1):
            ax = axes[i, j]
            if (model, method) in examples:
                amap = examples[(model, method)]["map"]
                lim = float(amap.abs().max()) or 1.0
                ax.imshow(amap, cmap="bwr", vmin=-lim, vmax=lim)
            else:
                ax.text(0.5, 0.5, "n/a", ha="center", va="center", fontsize=7)
            if i == 0:
                ax.set_title(method.replace("_", " "), fontsize=7)
    axes[0, 0].set_title("input", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{first['caption']} (red +, blue -)", fontsize=8)
    path = out / "example_maps.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
