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
  RelevanceMassAccuracy, Complexity, Sparseness; the correspondences are in :mod:`faithbench.bench.perf.quantus`),
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

The cases and sizes are :mod:`faithbench.bench.perf.cases`; the timing engine is :mod:`faithbench.bench.perf.timing`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from faithbench.bench.perf.cases import DEFAULT_CASES, DEFAULT_SIZES, QUICK_CASES, QUICK_SIZES, PerfCase, PerfSizes
from faithbench.bench.perf.quantus import import_quantus
from faithbench.bench.perf.timing import case_rows
from faithbench.bench.report.build import to_text
from faithbench.bench.run.provenance import provenance
from faithbench.bench.run.results import atomic_write_csv
from faithbench.bench.run.runner import resolve_device
from faithbench.errors import UserError
from faithbench.io import atomic_write_text

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = [
    "kind", "what", "implementation", "model", "device", "n_images", "seconds", "images_per_s", "model_calls",
    "model_inputs", "ratio_to_quantus", "ratio_to_limit", "peak_memory_mb", "agrees", "max_abs_diff", "note",
]  # fmt: skip


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

    shown = table.drop(columns=["kind", "device", "model_inputs", "note"]).rename(columns={"seconds": "ms"})
    shown["ms"] = shown["ms"] * 1e3
    for col in ("ms", "images_per_s", "ratio_to_quantus", "ratio_to_limit", "peak_memory_mb"):
        shown[col] = [f"{v:.4g}" if isinstance(v, float) and math.isfinite(v) else "" for v in shown[col]]
    shown["max_abs_diff"] = [f"{v:.1e}" if v == v else "" for v in shown["max_abs_diff"]]
    shown["agrees"] = ["" if v != v else str(v) for v in shown["agrees"]]
    return to_text(shown)
