"""The docs' figures that come from a run, generated from the recorded claims inputs (``results/claims/SUITE/``):
each suite's recorded rows (mean with its 95 % t interval over clusters) and the models' held-out accuracy and
locality check, and how firmly the samples of each recorded table order its methods. A page marks each generated
block ``<!-- recorded:NAME:start -->`` ... ``<!-- recorded:NAME:end -->`` (NAME: a suite, ``locality`` or
``agreement``); :func:`regenerate` rewrites every block of a page, and a test fails when a
committed page differs from it (``.ci/regenerate-claims-table`` writes them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from faithbench.bench.report.agreement import mad_ratio, ordinal_alpha, ranking_convergence
from faithbench.bench.report.claim_rule import Row, one_sample
from faithbench.bench.report.claim_verdicts import LOCALITY_FILE, RunData, read_locality, run_data
from faithbench.bench.report.statistics import wide_tables
from faithbench.bench.report.statistics_section import read_samples
from faithbench.bench.store.results import read_results
from faithbench.build_names import split_build

PAGES = ("README.md", "docs/index.md", "docs/results.md", "docs/models.md")  # the pages with recorded blocks
BLOCK = re.compile(r"(<!-- recorded:([\w-]+):start -->\n)(.*?)(<!-- recorded:\2:end -->)", re.S)


def _digits(value: float) -> int:
    """Digits for a mean by its scale: AUCs (below 1) 3, nats (below 10) 2, percentages 1."""
    return 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1


def read_recorded(folder: Path) -> RunData:
    """One suite's recorded claims inputs (what ``bench verdicts --record`` wrote) as the claims read them."""
    results = read_results(folder / "results.csv", required=("model", "method", "metric", "params"))
    record = json.loads((folder / "run.json").read_text())
    return run_data(record["suite"]["name"], results, read_samples(folder), record.get("models"), read_locality(folder))


def rows_table(run: RunData) -> str:
    """Every recorded row: model, method, metric, the mean over its clusters with the 95 % t interval, n."""
    lines = ["| model | method | metric | mean ± 95 % interval | n |", "| --- | --- | --- | ---: | ---: |"]
    for model, method, metric in sorted(run.params, key=lambda k: (k[2], k[0], k[1])):
        e = one_sample(run.samples, Row(model=model, method=method), metric, 0.95)
        if e is None:
            continue
        d = _digits(e.mean)
        lines.append(f"| `{model}` | {method} | {metric} | {e.mean:.{d}f} ± {(e.high - e.low) / 2:.{d}f} | {e.n} |")
    return "\n".join(lines) + "\n"


def locality_table(claims_dir: Path) -> str:
    """Each recorded model of each suite: its held-out accuracy (run.json) and the share of grid cells it wins in
    the locality check (``locality.csv``; - where the suite's claims need none)."""
    lines = ["| model | suite | held-out accuracy | cells won |", "| --- | --- | ---: | ---: |"]
    for folder in sorted(p for p in claims_dir.iterdir() if (p / "run.json").exists()):
        models = json.loads((folder / "run.json").read_text()).get("models", {})
        wins = read_locality(folder) if (folder / LOCALITY_FILE).exists() else {}
        for name in sorted(models):
            acc = models[name].get("test_accuracy")
            shown = f"{100 * acc:.1f} %" if isinstance(acc, int | float) else "-"
            won = f"{100 * wins[name]:.1f} %" if name in wins else "-"
            lines.append(f"| `{name}` | {folder.name} | {shown} | {won} |")
    return "\n".join(lines) + "\n"


def agreement_table(claims_dir: Path, tau: float = 0.9) -> str:
    """Each recorded suite's (model, metric) tables of build 1 with at least 3 methods on 4 samples they all score
    (:mod:`faithbench.bench.report.agreement`): Krippendorff's ordinal alpha of the samples' method ranks, the MAD
    ratio, and the fewest samples whose method means order the methods as all the samples do, by Kendall's tau-b
    of at least ``tau`` in the median of 200 draws (seeded)."""
    lines = [
        f"| suite | model | metric | methods | samples | Krippendorff's alpha | MAD ratio | samples for tau {tau:g} |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for folder in sorted(p for p in claims_dir.iterdir() if (p / "run.json").exists()):
        run = read_recorded(folder)
        tables = {
            key: wide.dropna()
            for key, wide in wide_tables(run.samples).items()
            if split_build(key[0])[1] == 1 and wide.shape[1] >= 3 and len(wide.dropna()) >= 4
        }
        convergence = ranking_convergence(tables)
        for (model, metric), wide in sorted(tables.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            values = wide.to_numpy(dtype=float)
            steps = convergence[(convergence["model"] == model) & (convergence["metric"] == metric)]
            firm = steps.loc[steps["tau"] >= tau, "n"]
            n = len(values)
            enough = f"{int(firm.min())} of {n}" if len(firm) else f"more than {n}"
            alpha, mad = ordinal_alpha(values), mad_ratio(values)
            shown = [f"{v:.2f}" if np.isfinite(v) else "-" for v in (alpha, mad)]
            cells = [folder.name, f"`{model}`", metric, str(values.shape[1]), str(n), *shown, enough]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def block(name: str, claims_dir: Path) -> str:
    """The generated text of block ``name``: ``locality``, ``agreement``, or a suite's recorded rows."""
    if name == "locality":
        return locality_table(claims_dir)
    if name == "agreement":
        return agreement_table(claims_dir)
    folder = claims_dir / name
    if not (folder / "run.json").exists():
        raise ValueError(f"no recorded claims inputs for {name!r} in {claims_dir}")
    return rows_table(read_recorded(folder))


def regenerate(text: str, claims_dir: Path) -> str:
    """``text`` with every recorded block rewritten from ``claims_dir``."""
    cache: dict[str, str] = {}

    def fill(m: re.Match) -> str:
        cache.setdefault(m.group(2), block(m.group(2), claims_dir))
        return m.group(1) + cache[m.group(2)] + m.group(4)

    return BLOCK.sub(fill, text)
