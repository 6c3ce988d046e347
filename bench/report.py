"""Leaderboards (terminal, Markdown, HTML, LaTeX) and plots from a run's CSV files."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch

from bench.suite import IMAGE_METRICS
from faithbench.errors import UserError


def read_results(path: Path) -> pd.DataFrame:
    """A run's ``results.csv``; every problem with the file is one line that names it."""
    path = Path(path)
    if path.is_dir():
        hint = f"; did you mean {path / 'results.csv'}?" if (path / "results.csv").exists() else ""
        raise UserError(f"{path} is a folder, not a results file (a run's results.csv){hint}")
    if not path.exists():
        raise UserError(f"results file {path} does not exist")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not a readable results CSV ({type(exc).__name__}: {exc})") from None
    missing = {"model", "method", "metric", "mean"} - set(frame.columns)
    if missing:
        raise UserError(f"{path} is not a faithbench results file (missing columns {', '.join(sorted(missing))})")
    return frame


def _cell(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    half = (high - low) / 2 if math.isfinite(high) and math.isfinite(low) else 0.0
    return f"{mean:.2f} ± {half:.2f}"


def leaderboard(results: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method), one column per metric: ``mean ± 95% CI half-width``.

    Column names carry the direction (↑ higher is better, ↓ lower is better) and unit.
    """
    metrics = [m for m in IMAGE_METRICS if m in set(results["metric"])]
    metrics += sorted(set(results["metric"]) - set(metrics))
    table = results.assign(
        cell=[
            _cell(m, lo, hi) for m, lo, hi in zip(results["mean"], results["ci_low"], results["ci_high"], strict=True)
        ]
    )
    pivot = table.pivot_table(index=["model", "method"], columns="metric", values="cell", aggfunc="first")
    pivot = pivot.reindex(columns=metrics).fillna("–")
    heads = {}
    for m in metrics:
        row = results[results["metric"] == m].iloc[0]
        arrow = "↑" if bool(row["higher_is_better"]) else "↓"
        unit = row.get("unit", "")
        heads[m] = f"{m} {arrow}" + (f" [{unit}]" if isinstance(unit, str) and unit else "")
    return pivot.rename(columns=heads).reset_index()


def to_text(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    widths = [max(len(str(c)), *(len(str(v)) for v in table[c])) for c in cols]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for _, row in table.iterrows():
        lines.append("  ".join(str(row[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))
    return "\n".join(lines)


def to_markdown(table: pd.DataFrame) -> str:
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame) -> str:
    def esc(v: object) -> str:
        s = str(v).replace("_", r"\_").replace("±", r"$\pm$").replace("↑", r"$\uparrow$")
        return s.replace("↓", r"$\downarrow$").replace("%", r"\%").replace("–", "--")

    cols = [esc(c) for c in table.columns]
    lines = [r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(results: pd.DataFrame, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    table = leaderboard(results)
    paths = {
        "markdown": out / "leaderboard.md",
        "html": out / "leaderboard.html",
        "latex": out / "leaderboard.tex",
        "text": out / "leaderboard.txt",
    }
    paths["markdown"].write_text(to_markdown(table))
    paths["html"].write_text(table.to_html(index=False, border=0))
    paths["latex"].write_text(to_latex(table))
    paths["text"].write_text(to_text(table) + "\n")
    return paths


def write_plots(run_dir: Path, out: Path) -> list[Path]:
    """Deletion / insertion curves per method, GridPG per model x method, example maps per model x method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    curves_path = run_dir / "curves.csv"
    if curves_path.exists() and curves_path.stat().st_size > 1:
        curves = pd.read_csv(curves_path)
        for metric in ("pixel_deletion", "pixel_insertion"):
            part = curves[curves["metric"] == metric]
            if part.empty:
                continue
            grid = sns.relplot(
                data=part,
                x="fraction",
                y="value",
                hue="method",
                col="model",
                kind="line",
                errorbar=("ci", 95),
                col_wrap=min(3, part["model"].nunique()),
                height=3.2,
            )
            grid.set_axis_labels(
                "fraction of blocks " + ("removed" if metric == "pixel_deletion" else "revealed"),
                "p(explained class)",
            )
            grid.figure.suptitle(metric.replace("_", " "), y=1.02)
            path = out / f"{metric}_curves.png"
            grid.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(grid.figure)
            written.append(path)
    samples_path = run_dir / "samples.csv"
    if samples_path.exists() and samples_path.stat().st_size > 1:
        samples = pd.read_csv(samples_path)
        part = samples[samples["metric"] == "gridpg"]
        if not part.empty:
            fig, ax = plt.subplots(figsize=(max(6, 0.9 * part["method"].nunique() * part["model"].nunique() / 2), 4))
            sns.barplot(data=part, x="method", y="value", hue="model", errorbar=("ci", 95), ax=ax)
            ax.set_ylabel("GridPG [%]")
            ax.tick_params(axis="x", rotation=30)
            path = out / "gridpg.png"
            fig.savefig(path, dpi=110, bbox_inches="tight")
            plt.close(fig)
            written.append(path)
    panel = _example_panel(run_dir, out, plt)
    if panel is not None:
        written.append(panel)
    return written


def _example_panel(run_dir: Path, out: Path, plt) -> Path | None:
    files = sorted((run_dir / "examples").glob("*.pt")) if (run_dir / "examples").exists() else []
    examples = {}
    for f in files:
        model, method = f.stem.split("__")
        ex = torch.load(f, map_location="cpu", weights_only=True)
        if "display_map" in ex:
            examples[(model, method)] = ex
    if not examples:
        return None
    models = sorted({m for m, _ in examples})
    methods = sorted({k for _, k in examples})
    fig, axes = plt.subplots(
        len(models), len(methods) + 1, figsize=(1.5 * (len(methods) + 1), 1.6 * len(models)), squeeze=False
    )
    first = next(iter(examples.values()))
    img = first["display_image"]
    for i, model in enumerate(models):
        axes[i, 0].imshow(img.permute(1, 2, 0).squeeze(-1), cmap="gray" if img.shape[0] == 1 else None)
        axes[i, 0].set_ylabel(model, fontsize=7)
        for j, method in enumerate(methods, start=1):
            ax = axes[i, j]
            if (model, method) in examples:
                amap = examples[(model, method)]["display_map"]
                lim = float(amap.abs().max()) or 1.0
                ax.imshow(amap, cmap="bwr", vmin=-lim, vmax=lim)
            else:
                ax.text(0.5, 0.5, "n/a", ha="center", va="center", fontsize=7)
            if i == 0:
                ax.set_title(method.replace("_", " "), fontsize=7)
    axes[0, 0].set_title("grid", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    label = first["display_label"]
    fig.suptitle(f"class {label} (top-left cell) explained on the same grid (red +, blue -)", fontsize=8)
    path = out / "example_maps.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def report(results_csv: Path, out: Path | None = None) -> tuple[str, dict[str, Path], list[Path]]:
    """Tables and plots for a run; returns the terminal table and the files written."""
    results = read_results(results_csv)
    run_dir = Path(results_csv).parent
    out = out or run_dir / "report"
    tables = write_tables(results, out)
    plots = write_plots(run_dir, out)
    return to_text(leaderboard(results)), tables, plots
