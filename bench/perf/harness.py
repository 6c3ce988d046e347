"""``python -m bench perf``: faithbench's metrics and attribution methods timed side by side with
Quantus 0.6.0 (captum, torch-cam 0.5.0 where they define the quantity) and with the cost of the model work alone, in
one process.

Every ratio's sides are timed in turns (:mod:`faithbench.bench.perf.timing`): after ``warmup`` untimed rounds,
``repeats`` rounds each run faithbench, its limit and Quantus once, one after the other; a ratio is taken
pair by pair (the two runs of one round) and reported as the median over the pairs with their min-max
(``ratio_to_limit``, ``_min``, ``_max``; the same for ``ratio_to_quantus``, ``ratio_to_captum`` and
``ratio_to_torchcam``); each side's time as its median
with min-max (``seconds``, ``seconds_min``, ``seconds_max``; ``pairs`` rounds), ``torch.cuda.synchronize``
before the clock is read on CUDA. Images are seeded uniform noise, targets the model's predicted classes,
attribution maps seeded Gaussian noise computed once: the same maps go to faithbench and Quantus and are never
part of a time. Rows (``implementation``):

* ``faithbench``: one call of the metric function on the whole batch (``pixel_deletion``,
  ``pixel_insertion``, ``comprehensiveness_sufficiency`` on pixel features, ``pixel_flipping``, ``road``,
  ``average_drop`` (with Increase in Confidence), ``mst_compactness`` (no model work and no peer: no ratio),
  ``grid_pointing_game`` on 2 x 2 grid maps, ``explanation_entropy``, ``gini_index``, ``effective_complexity``,
  ``consistency``; part ``robustness``: the robustness family, ``infidelity``, ``continuity``, ``random_logit``,
  ``emprt``, ``smprt`` and ``adcc`` (with ``adcc_coherency`` and ``adcc_complexity``; no peer), which explain again
  with ``PerfSizes.robust_method``, the last three by the suite's path on a fresh unit of the batch), or
  ``method.attribute`` on the batch;
* ``quantus``: the same quantity in Quantus where it defines it (PixelFlipping, RegionPerturbation,
  RelevanceMassAccuracy, Complexity, Sparseness, EffectiveComplexity, Consistency; the correspondences are in
  :mod:`faithbench.bench.perf.quantus`; MaxSensitivity, AvgSensitivity, LocalLipschitzEstimate,
  RelativeInputStability in :mod:`faithbench.bench.perf.perturbed`; Continuity, RandomLogit in
  :mod:`faithbench.bench.perf.peers`; EfficientMPRT, SmoothMPRT, made to randomise faithbench's layers and draw its
  noise, in :mod:`faithbench.bench.perf.randomised`), on the first ``n_quantus`` images (``n_images``), as Quantus
  loops over samples in NumPy. Its per-sample values must agree with faithbench's (``agrees``, ``max_abs_diff``)
  before the faithbench row gets ``ratio_to_quantus`` = faithbench seconds per image / Quantus seconds per image;
* ``captum`` (``sensitivity_max``, ``infidelity``) and ``torchcam`` (``ClassificationMetric``: Average Drop and
  Increase in Confidence, whose batch means must agree) on every image, the same way (``ratio_to_captum``,
  ``ratio_to_torchcam``);
* ``limit``: the physical limit of the faithbench row, the model work no implementation avoids, done the
  cheapest way: for a metric, the model alone under ``torch.no_grad`` on inputs of exactly the batch sizes
  the faithbench call used (recorded by a forward pre-hook); for a metric that explains again, the explaining
  method's limit on what it explains (``continuity``: the images, then their translations; ``emprt``, ``smprt``: the
  batch, or its noisy copies, on the trained model and on each randomised state, re-initialising the layers included;
  ``adcc``: the forwards of the images and of the masked images, then the masked images explained); for a method, its
  own limit (:mod:`faithbench.bench.perf.limits`: one forward + backward for the gradient methods, n_steps of them for
  IntegratedGradients, the backward to the layer for GradCAM, the rules' hooks for LRP, the forward passes
  of LIME and Shapley sampling). ``ratio_to_limit`` = faithbench seconds / limit seconds, pair by pair;
  ``status`` is ``ok``, or ``measurement error`` where its median is below 0.95 (no implementation does
  less than its limit: such a figure is the machine's noise, not a result).

``model_calls`` / ``model_inputs``: calls of the model's top-level module (and of its deep copies: a randomisation
test's randomised models) in the last timed run, and the inputs they carried. ``peak_memory_mb``:
``torch.cuda.max_memory_allocated`` over the timed runs (model and inputs included); empty (NaN) on the CPU, where
PyTorch keeps no allocator statistics.

The cases and sizes are :mod:`faithbench.bench.perf.cases`; the rows :mod:`faithbench.bench.perf.rows`; the
documentation's table :mod:`faithbench.bench.perf.markdown`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd

from faithbench.bench.perf.cases import (
    DEFAULT_CASES,
    DEFAULT_SIZES,
    PARTS,
    QUICK_CASES,
    QUICK_SIZES,
    PerfCase,
    PerfSizes,
)
from faithbench.bench.perf.quantus import import_quantus
from faithbench.bench.perf.rows import case_rows
from faithbench.bench.perf.timing import FLOOR, MEASUREMENT_ERROR
from faithbench.bench.report.build import to_text
from faithbench.bench.run.provenance import provenance
from faithbench.bench.run.runner import resolve_device
from faithbench.bench.store.results import atomic_write_csv
from faithbench.errors import UserError
from faithbench.io import atomic_write_text

COLUMNS = [
    "kind", "what", "implementation", "model", "device", "n_images", "pairs", "seconds", "seconds_min",
    "seconds_max", "images_per_s", "model_calls", "model_inputs", "ratio_to_quantus", "ratio_to_quantus_min",
    "ratio_to_quantus_max", "ratio_to_captum", "ratio_to_captum_min", "ratio_to_captum_max", "ratio_to_torchcam",
    "ratio_to_torchcam_min", "ratio_to_torchcam_max", "ratio_to_limit", "ratio_to_limit_min", "ratio_to_limit_max",
    "status", "peak_memory_mb", "agrees", "max_abs_diff", "note",
]  # fmt: skip


@dataclass
class PerfRun:
    """The table (columns ``COLUMNS``), notes on what was skipped, the ratios flagged as measurement errors
    (:func:`measurement_errors`), and the CSV written (if any)."""

    table: pd.DataFrame
    notes: list[str]
    csv: Path | None
    errors: list[str] = field(default_factory=list)


def run_perf(
    device: str = "auto",
    *,
    quick: bool = False,
    repeats: int | None = None,
    out: Path | str | None = None,
    cases: Sequence[PerfCase] | None = None,
    sizes: PerfSizes | None = None,
    seed: int = 0,
    only: Sequence[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> PerfRun:
    """Time every case (default: ``DEFAULT_CASES``; ``quick``: ``QUICK_CASES``, ``QUICK_SIZES``; ``repeats``:
    the rounds timed in turns, overriding the sizes'; ``only``: some of ``PARTS``, default all) and write ``perf.csv``
    and ``perf.json`` (sizes, notes, measurement errors and provenance) into ``out`` if given. ``say``: told the plan
    and each case as it starts."""
    dev = resolve_device(device)
    parts = tuple(only or PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise UserError(f"unknown perf part(s) {', '.join(unknown)}; valid: {', '.join(PARTS)}")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise UserError(f"repeats must be a positive integer, got {repeats!r}")
    cases = tuple(cases or (QUICK_CASES if quick else DEFAULT_CASES))
    sizes = replace(sizes or (QUICK_SIZES if quick else DEFAULT_SIZES), **({"repeats": repeats} if repeats else {}))
    quantus, note = import_quantus()
    notes = [note] if note else []
    say = say or (lambda _: None)
    say(f"timing {len(cases)} cases on {dev}, {sizes.repeats} rounds each" + (f" ({note})" if note else ""))
    rows = []
    for i, case in enumerate(cases, 1):
        say(f"[{i}/{len(cases)}] {case.model} at {case.image_size} px, batch {case.batch_size}")
        case_table, case_notes = case_rows(case, sizes, dev, seed, quantus, parts)
        rows += case_table
        notes += case_notes
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    errors = measurement_errors(table)
    csv = None
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        csv = out / "perf.csv"
        atomic_write_csv(csv, table)
        meta = {"provenance": provenance(dev, seed), "cases": [asdict(c) for c in cases], "sizes": asdict(sizes),
                "parts": list(parts)}  # fmt: skip
        meta["timing"] = f"{sizes.repeats} rounds in turns after {sizes.warmup} warm-up; ratios pair by pair"
        atomic_write_text(out / "perf.json", json.dumps({**meta, "notes": notes, "errors": errors}, indent=2) + "\n")
    return PerfRun(table, notes, csv, errors)


def measurement_errors(table: pd.DataFrame) -> list[str]:
    """One line per ratio to a limit whose median is below ``FLOOR``: a measurement error, not a result."""
    flagged = table[table["status"] == MEASUREMENT_ERROR]
    return [
        f"{r.what} on {r.model}: {r.ratio_to_limit:.3g}x its limit (pairs {r.ratio_to_limit_min:.3g}-"
        f"{r.ratio_to_limit_max:.3g}) is below {FLOOR}: a measurement error, not a result"
        for r in flagged.itertuples()
    ]


def _number(v: object, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if isinstance(v, float) and math.isfinite(v) else ""


def spread(median: object, low: object, high: object, scale: float = 1.0) -> str:
    """``median (low-high)``, 4 / 3 significant digits; empty where the median is undefined."""
    if not (isinstance(median, float) and math.isfinite(median)):
        return ""
    return f"{_number(median * scale)} ({_number(low * scale, 3)}-{_number(high * scale, 3)})"


def _spreads(table: pd.DataFrame, column: str, scale: float = 1.0) -> list[str]:
    """``column`` with its ``_min`` and ``_max`` as :func:`spread` strings."""
    return [spread(*v, scale=scale) for v in table[[column, f"{column}_min", f"{column}_max"]].itertuples(index=False)]


def format_table(table: pd.DataFrame) -> str:
    """The printed table: milliseconds and ratios as median (min-max over the pairs), 4 significant digits,
    empty where a value is undefined."""
    shown = pd.DataFrame(
        {
            "what": table["what"],
            "implementation": table["implementation"],
            "model": table["model"],
            "n_images": table["n_images"],
            "pairs": table["pairs"],
            "ms": _spreads(table, "seconds", 1e3),
            "images_per_s": [_number(v) for v in table["images_per_s"]],
            "model_calls": table["model_calls"],
            "ratio_to_quantus": _spreads(table, "ratio_to_quantus"),
            "ratio_to_limit": _spreads(table, "ratio_to_limit"),
            "status": ["" if v != v else v for v in table["status"]],
            "peak_memory_mb": [_number(v) for v in table["peak_memory_mb"]],
            "agrees": ["" if v != v else str(v) for v in table["agrees"]],
            "max_abs_diff": [f"{v:.1e}" if v == v else "" for v in table["max_abs_diff"]],
        }
    )
    return to_text(shown)
