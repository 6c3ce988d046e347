"""Python in a few lines: score your own models and methods without writing a suite file.

    results = benchmark(["my_resnet18"], methods=["gradient", "integrated_gradients"], metrics=[...],
                        dataset="mnist-224", n_samples=16)

``benchmark`` builds the suite from its arguments (validated like a suite file: every name, key and value), runs
it with the runner (resumable in ``out``) and returns the results table; :func:`faithbench.leaderboard` formats it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from faithbench.bench.run.question import question
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite
from faithbench.models.adapter import ModelAdapter


def benchmark(
    models: Sequence[str | ModelAdapter],
    methods: Sequence[str],
    metrics: Sequence[str],
    *,
    dataset: str | None = None,
    out: str | Path | None = None,
    device: str = "auto",
    progress: bool = False,
    controls: bool | Sequence[str] = False,
    tiers: Sequence[str] = (),
    name: str = "benchmark",
    **settings: Any,
) -> pd.DataFrame:
    """Run ``models`` x ``methods`` x ``metrics`` on ``dataset`` and return the results (one row per model,
    method and metric: mean, interval, counts, provenance). ``models``: registered names or adapters from
    :func:`faithbench.wrap_model`. ``dataset``: default the one the models were trained for (the zoo's), else
    ``mnist``. ``settings``: any other suite key (``n_samples``, ``seed``, ``batch_size``, ``data_root``,
    ``method_params``, a metric's settings table by its name). ``out``: the run folder (default: a new temporary
    folder); running again into the same folder resumes. ``controls``: the control explainers (``True``: all),
    ``tiers``: suites run after this one into ``out/NAME`` (``["truth"]``: the ground-truth tier); both off by
    default, as in a suite file and on the command line without ``--suite``: the same question gets the same
    numbers from all three (:mod:`faithbench.bench.run.question`)."""
    names = [m.name if isinstance(m, ModelAdapter) else m for m in models]
    data = question(names, methods, metrics, dataset=dataset, name=name, controls=controls, tiers=tiers, **settings)
    suite = build_suite(data, "benchmark()")
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="faithbench-"))
    results = run(suite, folder, device=device, progress=progress)
    results.attrs["run_dir"] = str(folder)
    return results
