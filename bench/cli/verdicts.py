"""``python -m bench verdicts RUN_DIR...``: the papers' claims (:mod:`faithbench.bench.report.claim_verdicts`)
evaluated from finished runs, one row per claim, into ``verdicts.csv`` and ``verdicts.md``.

Each run folder decides the claims of its suite (its ``run.json`` names it). The localisation claims are gated by the
locality check of every model they name, measured here on the models the runs scored: a zoo model is loaded from the
cache (never built) and must have the weights the run recorded; a model without the check is not eligible."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from faithbench.bench.report.claim_builds import with_builds_held
from faithbench.bench.report.claim_table import summary, verdict_table
from faithbench.bench.report.claim_verdicts import (
    LOCALITY_FILE,
    RunData,
    evaluate_claims,
    read_locality,
    run_data,
)
from faithbench.bench.report.formats import to_text
from faithbench.bench.report.paper_claims import CLAIMS_FILE, Claim, load_claims
from faithbench.bench.report.statistics_section import read_samples
from faithbench.bench.store.results import read_results
from faithbench.errors import UserError
from faithbench.io import atomic_write_text
from faithbench.models import load_model, zoo
from faithbench.models.data.splits import image_splits
from faithbench.models.zoo.locality import model_locality


def read_run(run_dir: Path) -> RunData:
    """A finished run's suite name, results and per-sample scores; a folder that lacks them is one line."""
    record = run_dir / "run.json"
    try:
        recorded = json.loads(record.read_text())
        suite = recorded["suite"]["name"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        why = f"no readable {record.name} naming its suite"
        raise UserError(f"{run_dir} is not a finished run folder ({why})") from None
    results = read_results(run_dir / "results.csv")
    try:
        samples = read_samples(run_dir)
        if samples is None:
            raise UserError(f"{run_dir} has no per-sample scores (samples.csv): the claims' intervals need them")
        return run_data(suite, results, samples, recorded.get("models"))
    except (KeyError, ValueError) as exc:
        raise UserError(f"{run_dir}: its results.csv or samples.csv lacks what the claims read ({exc})") from None


def run_locality(run_dir: Path, run: RunData, models: set[str], n_grids: int) -> dict[str, float]:
    """Cell wins of ``models`` in one run: as the run folder records them (:data:`LOCALITY_FILE`), else measured on
    a cached zoo model with the weights that run scored (``n_grids`` > 0), and the measured ones recorded there."""
    recorded = read_locality(run_dir)
    found = {m: recorded[m] for m in sorted(models) if m in recorded}  # sorted: the recorded files are stable
    measured = {}
    for name in sorted(models - set(found)) if n_grids else ():
        if name not in zoo.RECIPES or zoo.missing([name]):
            sys.stderr.write(f"no locality check for {name}: not a cached zoo model (`python -m bench zoo {name}`)\n")
            continue
        model = load_model(name)
        if run.weights.get(name, model.weights_sha256) != model.weights_sha256:
            sys.stderr.write(f"no locality check for {name}: the cached weights are not the ones {run_dir} scored\n")
            continue
        test = image_splits(zoo.RECIPES.get(name).dataset)[1]  # cached: read once per image set
        measured[name] = model_locality(model, test.images, test.labels, n_grids=n_grids).wins
    if measured:  # the report's claims section reads them there
        record_locality(run_dir, {**recorded, **measured})
    return found | measured


def record_locality(run_dir: Path, wins: dict[str, float]) -> None:
    text = pd.DataFrame({"model": list(wins), "cell_wins": list(wins.values())}).to_csv(index=False)
    try:
        atomic_write_text(run_dir / LOCALITY_FILE, text)
    except OSError as exc:
        sys.stderr.write(f"could not record the locality checks in {run_dir} ({exc.strerror}); the verdicts stand\n")


def cmd_verdicts(args: argparse.Namespace) -> int:
    rules, claims = load_claims(Path(args.claims) if args.claims else CLAIMS_FILE)
    runs: dict[str, tuple[Path, RunData]] = {}
    for run in args.runs:
        run_dir = Path(run)
        data = read_run(run_dir)
        if data.suite in runs:
            raise UserError(f"two runs of suite {data.suite!r} given ({runs[data.suite][0]} and {run_dir}): give one")
        runs[data.suite] = (run_dir, data)
    if args.locality_grids < 0:
        raise UserError(f"--locality-grids must be 0 or more, got {args.locality_grids}")
    for suite, (run_dir, data) in runs.items():
        gated = {r.model for c in claims if c.suite == suite and c.metric in rules.locality_metrics for r in c.rows}
        gated = with_builds_held(gated, data)
        runs[suite] = (run_dir, replace(data, locality=run_locality(run_dir, data, gated, args.locality_grids)))
    table = evaluate_claims(claims, rules, {s: d for s, (_, d) in runs.items()})
    if args.record:
        for suite, (_, data) in runs.items():
            record_inputs(Path(args.record) / suite, [c for c in claims if c.suite == suite], data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "verdicts.csv", index=False)
    (out / "verdicts.md").write_text(verdict_table(table))
    shown = table[["id", "here", "n", "paper_effect", "contains_paper", "verdict"]]
    sys.stdout.write(to_text(shown, width=180, keys=1) + "\n")
    sys.stdout.write("\n".join(summary(table).values()) + f"\nwritten: {out / 'verdicts.csv'}, {out / 'verdicts.md'}\n")
    return 0


def record_inputs(folder: Path, claims: list[Claim], run: RunData) -> None:
    """What the claims read of a run, and nothing else, as a run folder that ``verdicts`` reads back to the same
    rows: the claims' result rows and per-sample scores (first runs), the models' record and their locality checks
    (the committed inputs of the results page's claims table)."""
    models = with_builds_held({m for c in claims for m in (*c.models, *(r.model for r in c.rows))}, run)
    rows = {(m, r.method, c.metric) for c in claims for r in c.rows for m in with_builds_held({r.model}, run)}
    folder.mkdir(parents=True, exist_ok=True)
    keys = pd.MultiIndex.from_frame(run.samples[["model", "method", "metric"]])
    samples = run.samples[keys.isin(list(rows))]
    samples = samples.assign(undefined=samples["value"].isna())
    cols = ["model", "method", "rerun_of", "metric", "sample_id", "cluster_id", "value", "undefined"]
    atomic_write_text(folder / "samples.csv", samples[cols].to_csv(index=False))
    costs = {key: {"explain_time_s": t, "n": n} for key, (t, n) in run.costs.items()}  # the cost claims'
    results = pd.DataFrame(
        [
            {"suite": run.suite, "model": m, "method": j, "metric": k, "mean": float("nan"), "params": json.dumps(p)}
            | costs.get((m, j, k), {})
            for (m, j, k), p in run.params.items()
            if (m, j, k) in rows
        ],
        columns=["suite", "model", "method", "metric", "mean", "params", *(["explain_time_s", "n"] if costs else [])],
    )
    atomic_write_text(folder / "results.csv", results.to_csv(index=False))
    record = {"suite": {"name": run.suite}, "models": {m: i for m, i in run.models.items() if m in models}}
    atomic_write_text(folder / "run.json", json.dumps(record, indent=2, sort_keys=True))
    if wins := {m: w for m, w in run.locality.items() if m in models}:
        record_locality(folder, wins)
