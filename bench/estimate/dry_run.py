"""``bench run --dry-run``: the plan, resolved as the run would resolve it, how much of it the folder holds, and its
cost estimated from what the methods and metrics declare (:mod:`faithbench.bench.estimate.counts`), as text. No model
loads; the data set is read to count its images (not a folder given by --data-root nor one from Hugging Face)."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch

from faithbench.bench.estimate.counts import Estimate, device_free, estimate
from faithbench.bench.estimate.slice_time import other_device, time_from_slice, time_lines
from faithbench.bench.run.data import load_data
from faithbench.bench.run.distributed import device_named
from faithbench.bench.run.plan import Plan, resolve
from faithbench.bench.run.run_status import plan_table
from faithbench.bench.run.suite import Suite
from faithbench.calls import call_rows
from faithbench.models.data.datasets import DATASETS
from faithbench.models.data.hf import HF_DATASETS
from faithbench.progress import clock_text

LEFT_OUT = "not counted: the example map of each (model, method) for the report"


def dry_run_text(
    suite: Suite,
    out: Path,
    table_text: Callable[[pd.DataFrame], str],
    width: int,
    times_from: Path | None = None,
    device: str = "cpu",
    workers: int = 1,
) -> str:
    """The dry run's page: the plan's units with their pieces and model inputs, the model inputs of every (model,
    method) cell, what the counts leave out, the tiers' totals, and what ``out`` holds. ``table_text`` lays a table
    out (the command's text format), ``width`` the paragraphs; ``times_from``: a finished slice of the suite whose
    unit times scale to the plan's (:mod:`faithbench.bench.estimate.slice_time`), for the suite and each tier;
    ``device`` (``auto``: a GPU where this machine has one) and ``workers`` on it: the plan's calls (a GPU's found
    at run time, :mod:`faithbench.calls`) and each model's memory per input."""
    plan, dev = resolve(suite), device_named(device)
    count, image = evaluation_set(suite)
    cost = estimate(plan, n_images=count, device=dev, image=probe_image(suite, image))
    table = _units_table(plan, cost)
    lines = [
        f"suite {suite.name}: {len(suite.models)} models x {len(plan.jobs)} methods and controls, "
        f"{len(plan.metrics)} metrics, {suite.n_samples} samples, {suite.pieces} piece(s) per unit\n",
        table_text(table) + "\n",
        table_text(_inputs_matrix(plan, cost)) + "\n",
        textwrap.fill(_summary(suite, cost, dev, workers), width),
    ]
    notes = cost.units.explode("notes").dropna(subset=["notes"]).groupby("notes", sort=False)["method"]
    for note, methods in notes:
        names = list(dict.fromkeys(methods))
        which = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        lines.append(textwrap.fill(f"~ {note} ({which})", width, initial_indent="  ", subsequent_indent="    "))
    lines += [f"  {note}" for note in (*cost.notes, LEFT_OUT)]
    lines += [textwrap.fill(line, width, subsequent_indent="    ") for line in _over_budget(cost, dev, workers)]
    if times_from is not None:
        timed = time_lines(suite, times_from, count, dev.type)
        lines += [textwrap.fill(line, width, subsequent_indent="    ") for line in timed]
    elif dev.type == "cuda":
        lines.append(textwrap.fill(f"time: none for {dev.type} (counts are not seconds): pass --times-from a slice "
                                   "of the suite run on this GPU (e.g. --n-samples 8 --n-grids 4)", width))  # fmt: skip
    for tier in plan.tiers:
        t_count, t_image = evaluation_set(tier.plan.suite)
        t_cost = estimate(tier.plan, n_images=t_count, device=dev, image=t_image)
        t_inputs, t_calls = t_cost.total()
        lines.append(
            f"tier {tier.name} (into {out / tier.folder}): ≈ {t_inputs:,} model inputs, ≈ {t_calls:,} calls "
            f"(its plan: --suite {tier.name} --dry-run)"
        )
        tier_slice = times_from / tier.folder if times_from is not None else Path("-")
        if (tier_slice / "run.json").exists() and not other_device(tier_slice, dev.type):
            timed = time_from_slice(tier.plan.suite, tier_slice, t_count)
            lines.append(f"  time ≈ {clock_text(timed.seconds)} of compute (scaled from {times_from / tier.folder})")
    holds = (
        f"{out} holds a run: `python -m bench status {out}` says how far it got"
        if (out / "run.json").exists()
        else f"nothing in {out} yet"
    )
    lines.append(f"\n{int(table['pieces'].sum())} pieces in all; {holds}")
    lines.append(textwrap.fill(disk_line(suite, out), width))
    return "\n".join(lines) + "\n"


def _units_table(plan: Plan, cost: Estimate) -> pd.DataFrame:
    """The plan's table (:func:`~faithbench.bench.run.run_status.plan_table`) with each model's inputs and calls."""
    table = plan_table(plan)
    by_model = cost.units.groupby("model")[["model inputs", "model calls"]].sum()
    by_model = by_model.reindex(plan.suite.models, fill_value=0)
    shared = cost.models.set_index("model")
    for kind in ("inputs", "calls"):
        own = by_model[f"model {kind}"] + shared[f"shared {kind}"] + shared[f"before {kind}"]
        table[f"model {kind} ≈"] = [f"{int(own[m]):,}" for m in table["model"]]
    measured = shared["input bytes"]
    if measured.notna().any():  # a GPU plan: each model's memory per input, measured on its architecture
        table["MB an input ≈"] = [_megabytes(measured[m]) for m in table["model"]]
    return table


def _megabytes(n: float | None) -> str:
    return "not measured" if n is None or pd.isna(n) else f"{n / 2**20:,.1f}"


def _over_budget(cost: Estimate, device: torch.device, workers: int) -> list[str]:
    """A line per model of which one input with gradients takes more than its worker's share of the GPU's free
    memory (no call size fits it)."""
    free = device_free(device)
    if free is None:
        return []
    share = free / workers
    return [
        f"! {name}: one input with gradients ≈ {n / 2**30:.1f} GiB, more than the {share / 2**30:.1f} GiB free for "
        "each worker: it will not fit (a smaller model, fewer workers or another device)"
        for name, n in zip(cost.models["model"], cost.models["input bytes"], strict=True)
        if n is not None and not pd.isna(n) and n > share
    ]


def disk_line(suite: Suite, out: Path) -> str:
    """The free disk where the run will write, and what it keeps there."""
    where = next(p for p in (out.resolve(), *out.resolve().parents) if p.exists())
    free = shutil.disk_usage(where).free / 2**30
    kept = ("every unit's attribution maps (store_maps, for `rescore`; false keeps only the tables)"
            if suite.store_maps else "the tables and unit records (store_maps false: no maps)")  # fmt: skip
    return f"disk: {free:,.0f} GiB free at {where}; the run keeps {kept}"


def _inputs_matrix(plan: Plan, cost: Estimate) -> pd.DataFrame:
    """Model inputs per (method, model) cell: - refused, ? may be refused when the model loads, ~ an estimate."""
    u = cost.units
    marks = [f"{n:,}{'~' if notes else ''}{'' if known else '?'}" for n, notes, known in zip(
        u["model inputs"], u["notes"], u["known"], strict=True)]  # fmt: skip
    cells = dict(zip(zip(u["model"], u["method"], strict=True), marks, strict=True))
    return pd.DataFrame(
        {"model inputs ≈": [j.name for j in plan.jobs]}
        | {m: [cells.get((m, j.name), "-") for j in plan.jobs] for m in plan.suite.models}
    )


def _summary(suite: Suite, cost: Estimate, device: torch.device, workers: int) -> str:
    inputs, calls = cost.total()
    shared = cost.models
    before, each = int(shared["before inputs"].sum()), int(shared["shared inputs"].sum())
    return (
        f"≈ {inputs:,} model inputs in all: an estimate of the images through the models (a backward pass counted "
        f"with its forward; {each:,} of them shared by a model's units, {before:,} choosing items for every model "
        f"before any unit), not of model calls, which follow from the batch sizes: ≈ {calls:,} calls on "
        f"{_device_text(device, workers)} at {_sizes_text(suite, device)}. "
        "Per unit above: - the model refuses the method; ? it "
        "may refuse it when it loads (its rules need layers the model may lack); ~ an estimate:"
    )


def _device_text(device: torch.device, workers: int) -> str:
    if device.type == "cpu":
        return "the CPU"
    assumed = "" if torch.cuda.is_available() else " (assumed)"
    free = f"{(device_free(device) or 0) / 2**30:.0f} GiB free{assumed}"
    return f"{device} ({free}, {workers} worker{'s' if workers > 1 else ''} on it)"


def _sizes_text(suite: Suite, device: torch.device) -> str:
    """The call sizes: the CPU's, or where a GPU's start (found by trying at run time)."""
    rows = call_rows(suite.max_batch, device)
    text = f"batch_size {suite.batch_size} (inputs explained a call), at most {rows:,} inputs a model call"
    if device.type != "cuda":
        gpu = call_rows(suite.max_batch, "cuda")
        return (
            f"{text} (this plan is the CPU's; on a GPU calls start at {gpu:,} inputs and their sizes are found at run "
            "time, halving where one runs out of memory: --device cuda plans it)"
        )
    return (
        f"{text}: where each model's calls start on a GPU, halving where one runs out of memory (the sizes are "
        "found at run time, so these are the fewest calls the run can make; each unit records the sizes it used)"
    )


def probe_image(suite: Suite, image: torch.Tensor | None) -> torch.Tensor | None:
    """The image a GPU plan probes memory with: the data's first, else (a folder not read) a grey one of the data
    set's size and channels, which takes the same bytes."""
    spec = DATASETS.get(suite.dataset)
    if image is not None or not (spec.image_size and spec.channels):
        return image
    return torch.full((1, spec.channels, spec.image_size, spec.image_size), 0.5)


def evaluation_set(suite: Suite) -> tuple[int | None, torch.Tensor | None]:
    """The evaluation set's size and its first image, for the estimate (None where reading it means a folder or a
    download)."""
    if DATASETS.get(suite.dataset).needs_root or suite.dataset in HF_DATASETS:
        return None, None
    data = load_data(suite)
    return len(data.labels), data.images[:1]
