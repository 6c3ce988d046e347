"""Rankings across protocols (``bench rescore RUN --sweep``): how far each scoring-only alternative moves the
method ranking of every model x metric, and the leaderboard's mark for a method tied-best under all of them.

``RUN/rescored/protocols.csv``, one row per model x metric x protocol (the run's own settings, ``run``, and
each re-scored alternative of :mod:`faithbench.bench.run.sweep`):

- ``setting``: the alternative, ``TABLE.KEY = VALUE`` (each protocol re-scores the metrics of that table only);
- ``tau``: Kendall's tau-b between the methods' means under the protocol and under the run's settings (each
  metric's direction applied; the controls and reruns left out, as in the leaderboard); ``n_methods`` ranked;
- ``n_flipped_pairs`` / ``flipped_pairs``: the method pairs whose order reversed;
- ``best`` / ``tied_best``: the best method under the protocol and every method not significantly worse --
  the leaderboard's test (:func:`~faithbench.bench.report.statistics.paired_tests`: paired Wilcoxon, Holm) at
  level ``alpha``.

``protocols_summary.csv`` (:func:`every_protocol`), per model x metric: the lowest tau of the alternatives, the
flips summed over them, how many change the best method, and the methods tied-best under every protocol, which
the leaderboard marks :data:`EVERY` (while the sweep's ``run`` rows still match the run's own tests).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from faithbench.bench.report.order import method_order
from faithbench.bench.report.statistics import paired_tests
from faithbench.bench.store.results import atomic_write_csv, contestants, read_results, with_job_columns

EVERY = "⊛"
RUN_PROTOCOL = "run"  # the run's own settings
PROTOCOLS_CSV = "protocols.csv"
SUMMARY_CSV = "protocols_summary.csv"
COLUMNS = [
    "model", "metric", "protocol", "setting", "n_methods", "tau", "n_flipped_pairs", "flipped_pairs", "best",
    "tied_best", "alpha",
]  # fmt: skip
SUMMARY_COLUMNS = [
    "model", "metric", "n_protocols", "min_tau", "min_tau_protocol", "total_flipped_pairs", "best_changed",
    "best_under_every_protocol",
]  # fmt: skip
KEY = ["model", "metric"]


def _read(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """A run folder's contestants: (results, samples with undefined samples as NaN); None without results."""
    csv, per_sample = folder / "results.csv", folder / "samples.csv"
    if not csv.is_file() or csv.stat().st_size <= 1:
        return None
    samples = pd.DataFrame(columns=[*KEY, "method", "sample_id", "value"])
    if per_sample.is_file() and per_sample.stat().st_size > 1:
        samples = with_job_columns(pd.read_csv(per_sample))
        samples = contestants(samples.assign(value=samples["value"].where(~samples["undefined"].astype(bool))))
    return contestants(read_results(csv)), samples


def _signed(results: pd.DataFrame) -> dict[tuple[str, str], pd.Series]:
    """Per (model, metric): each method's mean, higher is better."""
    out = {}
    for (model, metric), part in results.groupby(KEY, sort=False):
        sign = 1.0 if bool(part["higher_is_better"].iloc[0]) else -1.0
        out[(model, metric)] = pd.Series(sign * part["mean"].to_numpy(dtype=float), index=part["method"])
    return out


def _tau(a: pd.Series, b: pd.Series) -> float:
    if len(a) < 2:
        return float("nan")
    with warnings.catch_warnings():  # a ranking that ties every method: tau is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.kendalltau(a.to_numpy(), b.to_numpy()).statistic)


def _rows(
    base: dict, frames: tuple[pd.DataFrame, pd.DataFrame], metrics: set[str], name: str, setting: str, alpha: float
) -> list[dict[str, Any]]:
    """The rows of one protocol (``frames``: its results and samples) for ``metrics``, against ``base``."""
    results, samples = frames
    results = results[results["metric"].isin(metrics)]
    tests = paired_tests(results, samples[samples["metric"].isin(metrics)], alpha=alpha) if len(samples) else None
    rows = []
    for (model, metric), after in _signed(results).items():
        before = base.get((model, metric), pd.Series(dtype=float))
        common = [m for m in after.index if m in before.index and np.isfinite(after[m]) and np.isfinite(before[m])]
        a, b = before[common], after[common]
        flips = [f"{x}/{y}" for x, y in combinations(common, 2) if (a[x] - a[y]) * (b[x] - b[y]) < 0]
        part = tests[(tests["model"] == model) & (tests["metric"] == metric)] if tests is not None else pd.DataFrame()
        best = part.loc[part["best"].astype(bool), "method"].tolist() if len(part) else []
        tied = method_order(part.loc[part["tied_best"].astype(bool), "method"]) if len(part) else []
        rows.append(
            dict(
                model=model,
                metric=metric,
                protocol=name,
                setting=setting,
                n_methods=len(common),
                tau=_tau(a, b),
                n_flipped_pairs=len(flips),
                flipped_pairs=" ".join(flips),
                best=best[0] if best else "",
                tied_best=" ".join(tied),
                alpha=alpha,
            )
        )
    return rows


def protocol_table(run_dir: Path, protocols: Iterable[Any], alpha: float = 0.05) -> pd.DataFrame:
    """The :data:`COLUMNS` table of ``protocols`` (each with ``name``, ``table``, ``key``, ``value``, ``metrics``
    and ``folder``: :class:`faithbench.bench.run.sweep.Protocol`) against the run in ``run_dir``; the run's
    own settings first, for the metrics some protocol scored again. A protocol with no results is left out."""
    protocols = list(protocols)
    frames = _read(Path(run_dir))
    if frames is None:
        return pd.DataFrame(columns=COLUMNS)
    base = _signed(frames[0])
    swept = {m for p in protocols for m in p.metrics}
    rows = _rows(base, frames, swept, RUN_PROTOCOL, "the run's settings", alpha)
    for p in protocols:
        if (scored := _read(Path(p.folder))) is not None:
            rows += _rows(base, scored, set(p.metrics), p.name, f"{p.table}.{p.key} = {p.value}", alpha)
    table = pd.DataFrame(rows, columns=COLUMNS)
    tables = {key: i for i, key in enumerate(dict.fromkeys(zip(table["model"], table["metric"], strict=True)))}
    order = [tables[key] for key in zip(table["model"], table["metric"], strict=True)]
    return table.assign(_t=order).sort_values("_t", kind="stable").drop(columns="_t").reset_index(drop=True)


def _methods(cell: Any) -> list[str]:
    return str(cell).split() if isinstance(cell, str) else []


def every_protocol(table: pd.DataFrame) -> pd.DataFrame:
    """Per model x metric of a :func:`protocol_table`: the :data:`SUMMARY_COLUMNS` (``best_under_every_protocol``:
    the methods in every protocol's ``tied_best``, in the run's order)."""
    rows = []
    for (model, metric), part in table.groupby(KEY, sort=False):
        sets = [set(_methods(t)) for t in part["tied_best"]]
        run = part[part["protocol"] == RUN_PROTOCOL]
        order = _methods(run["tied_best"].iloc[0]) if len(run) else method_order(set.union(*sets))
        others = part[part["protocol"] != RUN_PROTOCOL]
        taus = (others if len(others) else part)["tau"].astype(float)  # the run's own is 1 by construction
        run_best = run["best"].iloc[0] if len(run) else ""
        rows.append(
            dict(
                model=model,
                metric=metric,
                n_protocols=len(part),
                min_tau=taus.min() if taus.notna().any() else np.nan,
                min_tau_protocol=part.loc[taus.idxmin(), "protocol"] if taus.notna().any() else "",
                total_flipped_pairs=int(part["n_flipped_pairs"].sum()),
                best_changed=int((part["best"].fillna("") != run_best).sum()),
                best_under_every_protocol=" ".join(m for m in order if all(m in s for s in sets)),
            )
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def write_protocols(run_dir: Path, protocols: Iterable[Any], alpha: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``RUN/rescored/protocols.csv`` and ``protocols_summary.csv``; returns (table, summary)."""
    table = protocol_table(run_dir, protocols, alpha)
    summary = every_protocol(table)
    folder = Path(run_dir) / "rescored"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_csv(folder / PROTOCOLS_CSV, table)
    atomic_write_csv(folder / SUMMARY_CSV, summary)
    return table, summary


def protocol_marks(
    run_dir: Path, tests: pd.DataFrame, alpha: float = 0.05
) -> tuple[dict[tuple[str, str, str], str], list[str]]:
    """The leaderboard's :data:`EVERY` marks, {(model, method, metric): mark}, and their footnote, from
    ``RUN/rescored/protocols.csv`` if there is one. ``tests``: the leaderboard's paired tests of the run at
    ``alpha``; a model x metric whose tied-best methods differ from the sweep's ``run`` rows (the run changed
    since) gets no mark and is named in the footnote; a sweep tested at another alpha marks nothing."""
    path = Path(run_dir) / "rescored" / PROTOCOLS_CSV
    if not path.is_file() or path.stat().st_size <= 1 or tests.empty:
        return {}, []
    table = pd.read_csv(path, dtype={"tied_best": str, "best": str})
    if not np.allclose(table["alpha"].astype(float), alpha):
        swept = ", ".join(map(str, sorted(set(table["alpha"]))))
        return {}, [f"No {EVERY} marks: the protocol sweep (rescored/{PROTOCOLS_CSV}) tested at alpha = {swept}."]
    current = {key: set(part.loc[part["tied_best"].astype(bool), "method"]) for key, part in tests.groupby(KEY)}
    run = {
        (r.model, r.metric): set(_methods(r.tied_best)) for r in table[table["protocol"] == RUN_PROTOCOL].itertuples()
    }
    marks, stale = {}, []
    for r in every_protocol(table).itertuples():
        if r.n_protocols < 2:
            continue
        if run.get((r.model, r.metric)) != current.get((r.model, r.metric)):
            stale.append(f"{r.model}/{r.metric}")
            continue
        marks.update({(r.model, m, r.metric): EVERY for m in _methods(r.best_under_every_protocol)})
    n = table.loc[table["protocol"] != RUN_PROTOCOL, "protocol"].nunique()
    notes = [
        f"{EVERY} best or not significantly worse (the same test) under every protocol of `bench rescore --sweep`: "
        f"the run's settings and {n} scoring-only alternatives, one setting at a time (rescored/{PROTOCOLS_CSV})."
    ]
    if stale:
        notes.append(f"Not marked, the sweep's tied-best methods differ from this report's (sweep again): "
                     f"{', '.join(stale)}.")  # fmt: skip
    return marks, notes
