"""``python -m bench perf``: faithbench's metrics and attribution methods timed side by side with
Quantus 0.6.0 and with the cost of the model calls alone, in one process.

Every time is the wall-clock median of ``repeats`` runs after ``warmup`` runs, with
``torch.cuda.synchronize`` before the clock is read on CUDA. Images are seeded uniform noise,
targets the model's predicted classes, attribution maps seeded Gaussian noise computed once: the same maps go
to faithbench and Quantus and are never part of a time. Rows (``implementation``):

* ``faithbench``: one call of the metric function on the whole batch (``pixel_deletion``,
  ``pixel_insertion``, ``comprehensiveness_sufficiency`` on pixel features, ``grid_pointing_game`` on
  2 x 2 grid maps, ``explanation_entropy``, ``gini_index``), or ``method.attribute`` on the batch;
* ``quantus``: the same quantity in Quantus where it defines it (PixelFlipping, RegionPerturbation,
  RelevanceMassAccuracy, Complexity, Sparseness; the correspondences are in :mod:`faithbench.bench.perf_quantus`),
  on the first ``n_quantus`` images (``n_images``), as Quantus loops over samples in NumPy. Its
  per-sample values must agree with faithbench's (``agrees``, ``max_abs_diff``) before the faithbench
  row gets ``ratio_to_quantus`` = faithbench seconds per image / Quantus seconds per image;
* ``limit``: for a metric that queries the model, the model alone under ``torch.no_grad`` on inputs
  of exactly the batch sizes the faithbench call used (recorded by a forward pre-hook), the cost no
  implementation of the metric avoids: ``ratio_to_limit`` = faithbench seconds / limit seconds. For
  the attribution methods, one forward + backward of the batch (gradient of the target logits with
  respect to the input): a method's ``ratio_to_limit`` = its seconds / those seconds.

``model_calls`` / ``model_inputs``: calls of the model's top-level module in one run, and the inputs
they carried. ``peak_memory_mb``: ``torch.cuda.max_memory_allocated`` over the timed runs (model and
inputs included); empty (NaN) on the CPU, where PyTorch keeps no allocator statistics.

This module imports only the standard library at load time (the command line is built from it);
the timing engine is :mod:`faithbench.bench.perf_timing`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "kind", "what", "implementation", "model", "device", "n_images", "seconds", "images_per_s", "model_calls",
    "model_inputs", "ratio_to_quantus", "ratio_to_limit", "peak_memory_mb", "agrees", "max_abs_diff", "note",
]  # fmt: skip
CHEAP_METHODS = ("gradient", "input_x_gradient", "integrated_gradients", "gradcam", "lrp")
BCOS_METHODS = (*CHEAP_METHODS, "native", "lime", "shapley_sampling")


@dataclass(frozen=True)
class PerfCase:
    """One model at one size; ``model`` is a registered model name (torchvision ones get random weights)."""

    model: str
    image_size: int
    batch_size: int
    block_size: int  # deletion / insertion blocks and RegionPerturbation's patch
    methods: tuple[str, ...]


@dataclass(frozen=True)
class PerfSizes:
    """Problem sizes shared by every case."""

    repeats: int = 3
    warmup: int = 1
    fractions: tuple[float, ...] | None = None  # deletion and insertion; None: ALOE's 0, .01, ..., .8
    erasure_fractions: tuple[float, ...] | None = None  # None: the eraser summary's 1, 5, 10, 20, 50 %
    flip_steps: int = 16  # PixelFlipping steps (rounded up to a count that flips whole pixels)
    regions: int = 16  # RegionPerturbation regions
    n_quantus: int = 16  # images (GridPG: cell maps) Quantus is timed on
    chunk_size: int = 256  # inputs per model call in every metric and method (max_batch)
    method_params: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "integrated_gradients": {"n_steps": 8},
            "lime": {"n_samples": 64},
            "shapley_sampling": {"n_samples": 2},
        }
    )


DEFAULT_CASES = (PerfCase("resnet50", 224, 64, 16, CHEAP_METHODS), PerfCase("bcos_cnn_mnist", 28, 64, 4, BCOS_METHODS))
DEFAULT_SIZES = PerfSizes()
QUICK_CASES = (PerfCase("resnet18", 96, 8, 16, CHEAP_METHODS), PerfCase("bcos_cnn_mnist", 28, 8, 4, BCOS_METHODS))
QUICK_SIZES = PerfSizes(
    repeats=1,
    fractions=(0.0, 0.1, 0.3, 0.6),
    erasure_fractions=(0.1, 0.5),
    flip_steps=6,
    regions=6,
    n_quantus=2,
    chunk_size=64,
    method_params={
        "integrated_gradients": {"n_steps": 4},
        "lime": {"n_samples": 16},
        "shapley_sampling": {"n_samples": 1},
    },
)
QUICK_HELP = (
    "CI-friendly sizes for a CPU: torchvision resnet18 with random weights at 96 px and bcos_cnn_mnist at 28 px, "
    "batch 8; deletion/insertion at fractions 0, .1, .3, .6 (blocks of 16 and 4 px); comprehensiveness/sufficiency "
    "at 10 and 50 %%; 6 PixelFlipping steps and RegionPerturbation regions; Quantus on 2 images; at most 64 inputs "
    "per model call; IG 4 steps, LIME 16 samples, Shapley 1 sample; 1 repeat (about 25 s on a 2-core CPU with "
    "OMP_NUM_THREADS=1, which a CPU busy with other jobs needs). Default, sizes for a GPU: resnet50 at 224 px and "
    "bcos_cnn_mnist at 28 px, batch 64, ALOE's fractions, 16 steps and regions, Quantus on 16 images, 256 inputs "
    "per call, 3 repeats"
)


@dataclass
class PerfRun:
    """The table (columns ``COLUMNS``), notes on what was skipped, and the CSV written (if any)."""

    table: pd.DataFrame
    notes: list[str]
    csv: Path | None


def run_perf(
    device: str = "auto",
    *,
    quick: bool = False,
    repeats: int | None = None,
    out: Path | str | None = None,
    cases: Sequence[PerfCase] | None = None,
    sizes: PerfSizes | None = None,
    seed: int = 0,
) -> PerfRun:
    """Time every case (default: ``DEFAULT_CASES``; ``quick``: ``QUICK_CASES``, ``QUICK_SIZES``) and
    write ``perf.csv`` and ``perf.json`` (sizes, notes and provenance) into ``out`` if given."""
    import pandas as pd

    from faithbench.bench.perf_quantus import import_quantus
    from faithbench.bench.perf_timing import case_rows
    from faithbench.bench.provenance import provenance
    from faithbench.bench.results import atomic_write_csv
    from faithbench.bench.runner import resolve_device
    from faithbench.errors import UserError
    from faithbench.io import atomic_write_text

    dev = resolve_device(device)
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise UserError(f"repeats must be a positive integer, got {repeats!r}")
    cases = tuple(cases or (QUICK_CASES if quick else DEFAULT_CASES))
    sizes = replace(sizes or (QUICK_SIZES if quick else DEFAULT_SIZES), **({"repeats": repeats} if repeats else {}))
    quantus, note = import_quantus()
    notes = [note] if note else []
    rows = []
    for case in cases:
        case_table, case_notes = case_rows(case, sizes, dev, seed, quantus)
        rows += case_table
        notes += case_notes
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    csv = None
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        csv = out / "perf.csv"
        atomic_write_csv(csv, table)
        meta = {"provenance": provenance(dev, seed), "cases": [asdict(c) for c in cases], "sizes": asdict(sizes)}
        atomic_write_text(out / "perf.json", json.dumps({**meta, "notes": notes}, indent=2) + "\n")
    return PerfRun(table, notes, csv)


def format_table(table: pd.DataFrame) -> str:
    """The printed table: milliseconds, 4 significant digits, empty where a value is undefined."""
    from faithbench.bench.report import to_text

    shown = table.drop(columns=["kind", "device", "model_inputs", "note"]).rename(columns={"seconds": "ms"})
    shown["ms"] = shown["ms"] * 1e3
    for col in ("ms", "images_per_s", "ratio_to_quantus", "ratio_to_limit", "peak_memory_mb"):
        shown[col] = [f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else "" for v in shown[col]]
    shown["max_abs_diff"] = [f"{v:.1e}" if v == v else "" for v in shown["max_abs_diff"]]
    shown["agrees"] = ["" if v != v else str(v) for v in shown["agrees"]]
    return to_text(shown)


def cmd_perf(args: argparse.Namespace) -> int:
    """``python -m bench perf``: run, print the table and the notes, say where the files are."""
    start = time.perf_counter()
    run = run_perf(args.device, quick=args.quick, repeats=args.repeats, out=args.out)
    sys.stdout.write(format_table(run.table) + "\n")
    for note in run.notes:
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(f"wrote {run.csv} and perf.json beside it ({time.perf_counter() - start:.1f} s)\n")
    return 0


def add_perf_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Register the ``perf`` command on the sub-parsers of ``python -m bench``."""
    p = sub.add_parser(
        "perf", parents=[common], help="time the metrics and methods against Quantus and against the model calls alone"
    )
    p.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, ...")
    p.add_argument("--out", default=str(Path("runs") / "perf"), help="output folder of perf.csv (default runs/perf)")
    p.add_argument(
        "--repeats", type=int, help="timed runs per row after one warm-up, median reported (default 3; --quick 1)"
    )
    p.set_defaults(func=cmd_perf)
