"""Where a run stands, from its folder alone (no model loads): per model, the units done and skipped, the pieces
done, being computed (a fresh claim, with its worker) and left, and the claims of workers that died (stale: the
next worker takes them over). ``bench status RUN`` prints it; ``bench run --dry-run`` prints the plan before it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from faithbench.bench.run.plan import Plan
from faithbench.bench.store.claims import read_claims, stale_after
from faithbench.bench.store.pieces import PieceStore, piece_name
from faithbench.bench.store.results import RunStore


def _units(store: RunStore, plan: Plan) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The planned units the folder holds under the plan's keys, and those it holds under other keys (computed by
    other code or settings: a run now would compute them again)."""
    done, outdated = set(), set()
    for (model, job), plan_key in plan.keys.items():
        try:
            unit = json.loads(store.unit_path(model, job).read_text())
        except (OSError, ValueError):
            continue
        (done if unit.get("plan_key") == plan_key else outdated).add((model, job))
    return done, outdated


def run_status(out: Path, plan: Plan) -> tuple[pd.DataFrame, list[str]]:
    """One row per model (units, done, skipped, outdated: held under another code or settings; pieces done,
    running, stale, left) and one line per live claim."""
    out, suite = Path(out), plan.suite
    store, k = RunStore(out), suite.pieces
    try:
        skipped = {(s["model"], s["method"]) for s in json.loads((out / "skipped.json").read_text())}
    except (OSError, ValueError, KeyError, TypeError):
        skipped = set()
    (done, outdated), claims, limit = _units(store, plan), read_claims(out / "claims"), stale_after()
    rows, running = [], []
    for model in suite.models:
        pairs = [(model, job.name) for job in plan.jobs]
        open_pairs = [p for p in pairs if p not in done and p not in skipped]
        names = {piece_name(m, j, c, k): (m, j) for m, j in open_pairs for c in range(k)}
        finished = sum(PieceStore(out).readable(m, j, c, k) for m, j in open_pairs for c in range(k))
        live = {n: claims[n] for n in names if n in claims and claims[n][0] <= limit}
        stale = sum(1 for n in names if n in claims and claims[n][0] > limit)
        running += [f"{n}: {holder}, heartbeat {age:.0f} s ago" for n, (age, holder) in sorted(live.items())]
        rows.append(
            {
                "model": model,
                "units": len(pairs),
                "done": sum(p in done for p in pairs),
                "skipped": sum(p in skipped for p in pairs),
                "outdated": sum(p in outdated for p in pairs),
                "pieces done": finished,
                "running": len(live),
                "stale": stale,
                "left": len(names) - finished - len(live),
            }
        )
    return pd.DataFrame(rows), running


def plan_table(plan: Plan) -> pd.DataFrame:
    """The work a run would do, before any model loads: per model its units (methods and controls) and pieces.
    Whether a method can explain a model is known once the model loads: such units are skipped then, at no cost."""
    k, jobs = plan.suite.pieces, plan.jobs
    methods = sum(not j.is_control for j in jobs)
    return pd.DataFrame(
        [
            {"model": m, "methods": methods, "controls": len(jobs) - methods, "pieces": k * len(jobs)}
            for m in plan.suite.models
        ]
    )
