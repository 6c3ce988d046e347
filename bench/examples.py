"""The report's panel: one explanation per (model, method), computed by the report step.

The first metric of the suite that offers an ``example`` hook decides what is shown (e.g. one grid,
the same for every model). Models and methods are rebuilt from the run's ``run.json``; the maps
are cached in ``examples/`` next to the results, keyed by the unit they illustrate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import torch

from faithbench.errors import UserError
from faithbench.io import atomic_torch_save


def compute_examples(run_dir: Path, results: pd.DataFrame) -> dict[tuple[str, str], dict]:
    """(model, method) -> {"image", "map", "label", "caption"} for every pair in ``results``."""
    from faithbench.attributions import get_method
    from faithbench.bench.data import load_data
    from faithbench.bench.evaluate import suite_unit
    from faithbench.bench.results import contestants
    from faithbench.bench.runner import resolve_device
    from faithbench.bench.suite import build_suite
    from faithbench.metrics.registry import METRICS
    from faithbench.models import load_model

    try:
        record = json.loads((run_dir / "run.json").read_text())
        suite = build_suite(record["suite"], str(run_dir / "run.json"))
    except (OSError, KeyError, json.JSONDecodeError, UserError) as exc:
        print(f"[faithbench] no example panel: cannot rebuild the run's suite ({exc})", file=sys.stderr)
        return {}
    metric = next((m for m in suite.metrics if METRICS.get(m).example is not None), None)
    if metric is None or not (run_dir / "units").is_dir():  # a re-scored run keeps no units: no method runs
        return {}
    spec, cfg = METRICS.get(metric), suite.config(metric)
    # the controls ignore the model (the panel shows what the methods see); reruns repeat a method
    pairs = contestants(results)[["model", "method"]].drop_duplicates().itertuples(index=False, name=None)
    keys = {(u["model"], u["method"]): u["key"] for u in record.get("units", [])}  # exactly this run's units
    device = resolve_device("auto")
    data = load_data(suite)
    examples: dict[tuple[str, str], dict] = {}
    models: dict[str, object] = {}
    for model_name, method_name in sorted(pairs):
        path = run_dir / "examples" / f"{model_name}__{method_name}.pt"
        key = keys.get((model_name, method_name), "")
        if path.exists():
            cached = torch.load(path, map_location="cpu", weights_only=True)
            if cached.get("key") == key:
                examples[(model_name, method_name)] = cached
                continue
        if model_name not in models:
            try:
                models[model_name] = load_model(model_name, device=device)
            except UserError as exc:
                print(f"[faithbench] no example maps for {model_name}: {exc}", file=sys.stderr)
                models[model_name] = None
        model = models[model_name]
        if model is None:
            continue
        method = get_method(method_name, **suite.method_params.get(method_name, {}))
        unit = suite_unit(suite, model, method, data, torch.arange(0), device)
        shown = spec.example(unit, cfg)
        example = {
            "key": key,
            "image": shown.image,
            "map": shown.attribution,
            "label": shown.label,
            "caption": shown.caption,
        }
        atomic_torch_save(path, example)
        examples[(model_name, method_name)] = example
    return examples


def example_panel(run_dir: Path, results: pd.DataFrame, out: Path, plt) -> Path | None:
    examples = compute_examples(run_dir, results)
    if not examples:
        return None
    models = list(dict.fromkeys(results["model"]))
    methods = list(dict.fromkeys(results["method"]))
    models = [m for m in models if any(k[0] == m for k in examples)]
    methods = [m for m in methods if any(k[1] == m for k in examples)]  # the controls have no example
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
