"""``python -m bench zoo``: build or load the offline zoo; per model its accuracy and the locality check.

The locality check (:mod:`faithbench.models.zoo.locality`) asks whether a model classifies the cells of a grid of
distinct-class digits locally, as the grid pointing game assumes: 3 x 3 grids for CNNs, 2 x 2 for
ViTs (which see cell-size windows at stride half a cell). ``positive``: share of cells whose class
logit on the grid, minus the model's logit bias, is positive; ``wins``: share of cells whose own
contribution (output with every other cell blanked to black, minus output on a black grid) is
classified as their class.

The training cost of B-cosification (B-cosification Tab. 4: a B-cosified model reaches its from-scratch
counterpart's accuracy in a fraction of the epochs) is read from the builds' per-epoch held-out accuracies
(``test_accuracy_by_epoch`` in each checkpoint's info): :func:`training_costs`.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from faithbench.models import load_model
from faithbench.models import zoo as model_zoo
from faithbench.models.data.splits import image_splits
from faithbench.models.zoo.locality import model_locality


@dataclass(frozen=True)
class ZooRow:
    name: str
    family: str
    accuracy: float
    build_seconds: float | None  # from the checkpoint (None for checkpoints built before it was recorded)
    load_seconds: float
    positive: float | None = None
    wins: float | None = None
    n_cells: int = 0
    accuracy_by_epoch: tuple[float, ...] = ()  # held-out accuracy after every training epoch (builds that log it)


def zoo_rows(names: list[str], *, n_grids: int = 50, seed: int = 0) -> list[ZooRow]:
    """Build or load every zoo model in ``names``; run the locality check on ``n_grids`` grids (0 = skip)."""

    rows = []
    for name in names:
        start = time.perf_counter()
        model = load_model(name)
        loaded = time.perf_counter() - start
        info = model.info
        curve = tuple(info.get("test_accuracy_by_epoch") or ())
        row = ZooRow(
            name, model.family, info["test_accuracy"], info.get("build_seconds"), loaded, accuracy_by_epoch=curve
        )
        if n_grids and model.modality == "image":  # a grid of digits; text models have no cells
            test = image_splits(model_zoo.RECIPES.get(name).dataset)[1]  # cached: read once per image set
            check = model_locality(model, test.images, test.labels, n_grids=n_grids, seed=seed)
            row = ZooRow(**{**row.__dict__, "positive": check.positive, "wins": check.wins, "n_cells": check.n_cells})
        rows.append(row)
    return rows


def zoo_table(rows: list[ZooRow]) -> str:
    """The rows as a fixed-width text table."""

    def pct(v: float | None) -> str:
        return "-" if v is None or v != v else f"{100 * v:.1f}%"  # not measured, or NaN: nothing to check

    width = max(22, *(len(r.name) + 1 for r in rows))
    lines = [
        f"{'model':<{width}} {'family':<10} {'held-out acc':>12} {'built in s':>10} {'loaded in s':>11} "
        f"{'grid cells':>10} {'positive':>9} {'wins':>7}"
    ]
    for r in rows:
        built = "-" if r.build_seconds is None else f"{r.build_seconds:.0f}"
        lines.append(
            f"{r.name:<{width}} {r.family:<10} {100 * r.accuracy:>11.1f}% {built:>10} {r.load_seconds:>11.1f} "
            f"{r.n_cells or '-':>10} {pct(r.positive):>9} {pct(r.wins):>7}"
        )
    return "\n".join(lines)


LEGEND = (
    "locality check (grids of distinct-class digits the model gets right alone; 3x3 for CNNs, 2x2 for ViTs "
    "seen through cell-size windows at stride half a cell):\n"
    "  positive = the cell's class logit on the grid, minus the logit bias, is > 0\n"
    "  wins     = the cell's class is the unique argmax of what the cell adds: the output on the grid with every\n"
    "             other cell blanked to black minus the output on an all-black grid"
)


# (B-cosified model, its from-scratch B-cos counterpart on the matched recipe): the pairs of B-cosification Tab. 4.
COST_PAIRS = (("bcosified_cnn_gap_mnist", "bcos_gap_cnn_mnist"), ("bcosified_vit_mnist", "bcos_vit_mnist"))


@dataclass(frozen=True)
class TrainingCost:
    """How many fine-tuning epochs a B-cosified model needs to reach the final held-out accuracy of a B-cos model
    trained from scratch, from the two builds' per-epoch logs."""

    bcosified: str
    from_scratch: str
    target: float  # the from-scratch model's final held-out accuracy
    epochs_to_target: int | None  # first fine-tuning epoch at or above it (None: not within the budget)
    bcosified_epochs: int
    scratch_epochs: int
    seconds_to_target: float | None  # fine-tuning wall time up to that epoch (build time pro rata)
    scratch_seconds: float | None


def epochs_to_reach(curve: list[float], target: float) -> int | None:
    """1-based index of the first entry of ``curve`` >= ``target``, or None."""
    return next((i for i, a in enumerate(curve, start=1) if a >= target), None)


def training_cost(bcosified: ZooRow, scratch: ZooRow) -> TrainingCost | None:
    """The cost comparison of one pair, or None when a build predates the per-epoch log."""
    curve = bcosified.accuracy_by_epoch
    if not curve or not scratch.accuracy_by_epoch:
        return None
    k = epochs_to_reach(list(curve), scratch.accuracy)
    seconds = bcosified.build_seconds
    return TrainingCost(
        bcosified.name,
        scratch.name,
        scratch.accuracy,
        k,
        len(curve),
        len(scratch.accuracy_by_epoch),
        None if k is None or seconds is None else seconds * k / len(curve),
        scratch.build_seconds,
    )


def training_costs(rows: list[ZooRow]) -> list[TrainingCost]:
    """Every pair of :data:`COST_PAIRS` whose two models are among ``rows`` (and logged per epoch)."""
    by_name = {r.name: r for r in rows}
    pairs = [(by_name[b], by_name[s]) for b, s in COST_PAIRS if b in by_name and s in by_name]
    return [c for c in (training_cost(b, s) for b, s in pairs) if c is not None]


def cost_lines(costs: list[TrainingCost]) -> str:
    """The comparison in words, one line per pair."""
    lines = ["training cost of B-cosification (B-cosification Tab. 4; held-out accuracy after every epoch):"]
    for c in costs:
        where = f"{c.target:.1%} (its final held-out accuracy)"
        if c.epochs_to_target is None:
            lines.append(
                f"  {c.bcosified} does not reach {c.from_scratch}'s {where} in its {c.bcosified_epochs} epochs"
            )
            continue
        ratio = c.scratch_epochs / c.epochs_to_target
        line = (
            f"  {c.bcosified} reaches {c.from_scratch}'s {where} after {c.epochs_to_target} fine-tuning epoch(s) of "
            f"{c.bcosified_epochs}, against {c.scratch_epochs} from scratch: {ratio:.1f}x fewer epochs"
        )
        if c.seconds_to_target and c.scratch_seconds:
            line += f", {c.scratch_seconds / c.seconds_to_target:.1f}x less time"
        lines.append(line + " (the standard model's own training not counted, as in the paper)")
    return "\n".join(lines)


def cmd_zoo(args: argparse.Namespace) -> int:
    # Default: the digit zoo (minutes); --text: the CPU-sized text zoo (about 25 min on 2 cores); or the named
    # models (GPU presets and Hugging Face checkpoints are built only when named).
    modality = "text" if args.text else "image"
    default = [n for n, r in model_zoo.RECIPES.items() if r.modality == modality and not r.on_request]
    names = model_zoo.RECIPES.require(args.models or default, "zoo models")
    rows = zoo_rows(list(names), n_grids=args.locality_grids)
    sys.stdout.write(zoo_table(rows) + "\n")
    if args.locality_grids:
        sys.stdout.write(LEGEND + "\n")
    costs = training_costs(rows)
    if costs:
        sys.stdout.write(cost_lines(costs) + "\n")
    sys.stdout.write(f"checkpoints: {model_zoo.cache_dir()}\n")
    return 0
