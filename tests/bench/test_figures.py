"""The report's figures on a synthetic run (no model is loaded): valid PNGs within the size a page shows, split per
model when there are many models, every method in its order.py colour, all-zero maps labelled, the chance level
named, the controls set apart."""

import dataclasses
import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from faithbench.bench.report import cost, curves, heatmap, panel
from faithbench.bench.report.figures import write_plots
from faithbench.bench.report.order import method_colour
from faithbench.bench.report.statistics_section import LeaderboardStats
from faithbench.bench.report.style import MAX_PX

matplotlib.use("Agg")

MODELS = [f"model_{i}" for i in range(7)]
METHODS = ["native", "gradient", "input_x_gradient", "integrated_gradients", "gradcam", "lrp", "lime"]
CONTROLS = ["random", "uniform", "centre", "edges", "oracle"]
METRICS = {"gridpg": (True, "%"), "pixel_deletion": (False, "AUC"), "entropy": (False, "nats")}  # name: direction


def _results(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for model in MODELS:
        for method in METHODS + CONTROLS:
            for metric, (higher, unit) in METRICS.items():
                if method == "oracle" and metric != "gridpg":
                    continue
                chance = 100 / 9 if metric == "gridpg" and method in ("random", "uniform") else None
                rows.append(
                    {
                        "model": model,
                        "method": method,
                        "rerun_of": np.nan,
                        "rerun_seed": np.nan,
                        "is_control": method in CONTROLS,
                        "metric": metric,
                        "mean": chance if chance is not None else float(rng.uniform(0, 90)),
                        "higher_is_better": higher,
                        "unit": unit,
                        "explain_time_s": float(rng.uniform(0.01, 2)),
                        "explained": "samples",
                        "n": 8,
                        "n_dropped": 0,
                    }
                )
    return pd.DataFrame(rows)


def _stats(results: pd.DataFrame) -> LeaderboardStats:
    methods = results[~results["is_control"]]
    table = methods[["model", "metric", "method"]].copy()
    rank = methods.groupby(["model", "metric"])["mean"].rank(ascending=False)
    table = table.assign(
        best=rank == 1,
        tied_best=rank <= 2,
        p_rank1=np.where(rank == 1, 0.9, 0.01),
        rank_low=rank,
        rank_high=rank + 1,
        paired_subset=False,
    )
    skill = table[["model", "metric", "method"]].assign(beats_random=table["method"] != "gradient")
    pairs = [(a, b) for a in METRICS for b in METRICS if a < b]
    agreement = pd.DataFrame(
        [{"model": m, "metric_a": a, "metric_b": b, "tau": 0.3, "n_methods": 7} for m in MODELS for a, b in pairs]
    )
    return LeaderboardStats(table, agreement, pd.DataFrame(), skill, pd.DataFrame(), 0.05, 100)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, pd.DataFrame, LeaderboardStats]:
    rng = np.random.default_rng(0)
    run_dir = tmp_path_factory.mktemp("run")
    results = _results(rng)
    fractions = [0.0, 0.1, 0.3, 0.6]
    curve_rows = [
        {
            "model": model,
            "method": method,
            "rerun_of": np.nan,
            "rerun_seed": np.nan,
            "is_control": method in CONTROLS,
            "metric": "pixel_deletion",
            "sample_id": s,
            "fraction": f,
            "value": float(np.exp(-3 * f) + rng.normal(0, 0.05)),
        }
        for model in MODELS
        for method in METHODS + CONTROLS[:4]
        for s in range(3)
        for f in fractions
    ]
    pd.DataFrame(curve_rows).to_csv(run_dir / "curves.csv", index=False)
    units = []
    for model in MODELS[:2]:
        for method in METHODS:
            key = f"{model}-{method}"
            units.append({"model": model, "method": method, "key": key})
            amap = torch.zeros(12, 12) if method == "lime" else torch.randn(12, 12)
            example = {"key": key, "image": torch.rand(1, 12, 12), "map": amap, "label": 0, "caption": "class 0"}
            (run_dir / "examples").mkdir(exist_ok=True)
            torch.save(example, run_dir / "examples" / f"{model}__{method}.pt")
    (run_dir / "run.json").write_text(json.dumps({"units": units}))
    return run_dir, results, _stats(results)


@pytest.fixture(scope="module")
def written(run, tmp_path_factory) -> list[Path]:
    run_dir, results, stats = run
    said = []
    paths = write_plots(run_dir, results, tmp_path_factory.mktemp("report"), stats, progress=said.append)
    assert said and all(line.startswith("report: figure") for line in said)
    return paths


def test_every_figure_is_a_png_a_page_can_show(written):
    assert written
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG", path.name
            assert image.width <= MAX_PX[0] and image.height <= MAX_PX[1], (path.name, image.size)
        assert path.stat().st_size < 400_000, path.name


def test_figures_come_in_reading_order_and_many_models_are_split_per_model(written):
    names = [p.name for p in written]
    per_model = [f"curves_{m}.png" for m in MODELS] + [f"rank_intervals_{m}.png" for m in MODELS]
    assert names == [
        "gridpg.png",
        "pixel_deletion.png",
        "entropy.png",
        "example_maps.png",
        *per_model,
        "metric_agreement.png",
        "faithfulness_vs_cost.png",
    ]


def _capture(monkeypatch, module) -> list:
    """The figures ``module`` saves, kept open for inspection."""
    figures = []

    def keep(fig, path, plt):
        figures.append(fig)
        fig.savefig(path)
        return path

    monkeypatch.setattr(module, "save", keep)
    return figures


def test_an_all_zero_map_is_labelled(run, tmp_path, monkeypatch):
    figures = _capture(monkeypatch, panel)
    run_dir, results, _ = run
    import matplotlib.pyplot as plt

    panel.example_panel(run_dir, results, tmp_path, plt)
    (fig,) = figures
    labelled = [ax for ax in fig.axes if any(t.get_text() == panel.ALL_ZERO for t in ax.texts)]
    titles = [ax.get_title() for ax in fig.axes[1 : len(METHODS) + 1]]
    assert len(labelled) == 2 and titles[METHODS.index("lime")] == "lime"  # lime's map is all zero on both models
    plt.close(fig)


def test_every_method_has_its_order_colour_and_controls_are_grey(run, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    run_dir, results, _ = run
    curve_figs, cost_figs = _capture(monkeypatch, curves), _capture(monkeypatch, cost)
    curves.curve_figures(pd.read_csv(run_dir / "curves.csv"), results, tmp_path, plt)
    cost.cost_plot(results, tmp_path, plt)
    figures = curve_figs + cost_figs
    lines = [line for fig in curve_figs for ax in fig.axes for line in ax.get_lines()]
    assert lines
    for line in lines:
        method = line.get_label().replace(" ", "_")
        assert to_hex(line.get_color()) == method_colour(method), method
    for ax in cost_figs[0].axes:
        for points in ax.collections:
            method = points.get_label().replace(" ", "_")
            assert to_hex(points.get_facecolor()[0]) == method_colour(method), method
    assert method_colour("uniform") == method_colour("random") != method_colour("native")
    for fig in figures:
        plt.close(fig)


def test_the_heatmap_sets_the_controls_apart_and_names_the_chance_level(run, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    run_dir, results, stats = run
    figures = _capture(monkeypatch, heatmap)
    heatmap.score_heatmap(results, "gridpg", tmp_path, plt, stats)
    heatmap.score_heatmap(results, "entropy", tmp_path, plt, stats)
    for fig in figures:
        methods_ax, controls_ax = fig.axes[:2]
        assert [t.get_text().replace(" ", "_") for t in methods_ax.get_xticklabels()] == METHODS
        assert controls_ax.get_title() == "controls"
    gridpg_controls = [t.get_text() for t in figures[0].axes[1].get_xticklabels()]
    assert gridpg_controls == ["random", "uniform = chance", "centre", "edges", "oracle"]
    # the uniform and the random map score differently on this metric: no chance level is claimed
    assert "uniform = chance" not in [t.get_text() for t in figures[1].axes[1].get_xticklabels()]
    texts = " ".join(t.get_text() for t in figures[0].texts)
    assert "higher is better" in texts and "chance level" in texts and "11.1" in texts
    assert any("✗" in t.get_text() for t in figures[0].axes[0].texts)  # gradient: not better than random
    for fig in figures:
        plt.close(fig)


def test_figures_drawn_side_by_side_are_byte_for_byte_the_ones_drawn_one_after_another(run, tmp_path):
    run_dir, results, stats = run
    few = results[results["model"].isin(MODELS[:2])]
    stats = dataclasses.replace(stats, table=stats.table[stats.table["model"].isin(MODELS[:2])])
    serial = write_plots(run_dir, few, tmp_path / "serial", stats, workers=1)
    side_by_side = write_plots(run_dir, few, tmp_path / "side_by_side", stats, workers=2)
    assert [p.name for p in side_by_side] == [p.name for p in serial]
    assert "rank_intervals_model_1.png" in [p.name for p in serial]
    for a, b in zip(serial, side_by_side, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
