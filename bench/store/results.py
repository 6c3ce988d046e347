"""Result files: per-unit records, tidy CSVs (aggregates, per-sample scores, curves), provenance.

Layout of a run folder::

    .lock             held by the one process writing the folder (:mod:`faithbench.bench.store.folder_lock`)
    run.json          suite, provenance, and the run's units: (model, method, key) of each, the manifest that
                      ``report`` and ``rescore`` read (a unit file that the manifest does not name is not
                      part of the run), and what the units recorded of each model (held-out accuracy, test
                      size, training budget: the papers' accuracy and training-cost claims read it)
    locality.csv      the locality checks ``bench verdicts`` measured for the run's models (it reads them back)
    units/*.json      one finished (model, method) unit each: per-sample scores, curves, timings
    maps/*.pt         every attribution map each unit computed, under its resume key (``bench rescore``)
    examples/*.pt     example attribution maps for the report's panel
    results.csv       one row per (model, method, metric): mean, std, n, 95% CI, undefined count, times,
                      provenance and parameters on every row
    samples.csv       per-sample scores (model, method, metric, sample_id, value, undefined)
    curves.csv        per-sample curves (model, method, metric, sample_id, fraction, value)
    results.json      the run as one JSON document: suite, provenance, models and the rows (bench.store.export)

Every file is written atomically (temporary file + rename). The CSVs are rewritten from the finished units while the
run goes and when it stops (each unit's rows formatted once: :mod:`faithbench.bench.store.tidy`), so an interrupted
run keeps everything it finished.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from faithbench.bench.store.tidy import JOB_COLUMNS, RESULT_COLUMNS, Tables, legacy_job_columns
from faithbench.errors import UserError
from faithbench.io import atomic_torch_save, atomic_write_text, load_torch


def with_job_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """A results or samples table with its job columns (derived for files written before they existed)."""
    if frame.empty or "is_control" in frame.columns:
        return frame
    derived = pd.DataFrame([legacy_job_columns(m) for m in frame["method"]], index=frame.index)
    return frame.assign(**{c: derived[c] for c in derived.columns})


def first_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Without the reruns of seeded methods (they feed the rerun agreement, not the leaderboard)."""
    return frame[frame["rerun_of"].isna()]


def contestants(frame: pd.DataFrame) -> pd.DataFrame:
    """The methods of the leaderboard: first runs, no controls (the controls are the yardstick)."""
    return frame[frame["rerun_of"].isna() & ~frame["is_control"].astype(bool)]


# What every row written since the columns exist holds (the job columns are derived for older files).
WRITTEN_COLUMNS = tuple(c for c in RESULT_COLUMNS if c not in JOB_COLUMNS)


def read_results(path: Path, required: Iterable[str] = ("model", "method", "metric", "mean")) -> pd.DataFrame:
    """A run's ``results.csv``; every problem with the file is one line that names it. ``required``: the
    columns the caller reads (the report reads :data:`WRITTEN_COLUMNS`)."""
    path = Path(path)
    if path.is_dir():
        hint = f"; did you mean {path / 'results.csv'}?" if (path / "results.csv").exists() else ""
        raise UserError(f"{path} is a folder, not a results file (a run's results.csv){hint}")
    if not path.exists():
        raise UserError(f"results file {path} does not exist")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is not a readable results CSV ({type(exc).__name__}: {exc})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise UserError(f"{path} is not a faithbench results file (missing column(s) {', '.join(missing)})")
    return with_job_columns(frame)


def atomic_write_csv(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_text(path, frame.to_csv(index=False))


_RERUN = "run the run's `bench run` command into the folder again: it recomputes what is missing"


def tier_folder(tier: str) -> str:
    """The sub-folder of a run that holds a tier's run (a suite's ``tiers``): the suite's name, or its file's stem."""
    return Path(tier).stem


class RunStore:
    """The files of one run folder."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.units = self.out / "units"
        self.tables = Tables(self.out)

    def unit_path(self, model: str, method: str) -> Path:
        return self.units / f"{model}__{method}.json"

    def load_unit(self, model: str, method: str, key: str) -> dict | None:
        """A finished unit with this configuration key, or None (missing, other config, unreadable)."""
        path = self.unit_path(model, method)
        try:
            unit = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return unit if unit.get("key") == key else None

    def save_unit(self, unit: dict) -> None:
        atomic_write_text(self.unit_path(unit["model"], unit["method"]), json.dumps(unit))

    def save_record(
        self,
        suite: dict,
        prov: dict,
        units: Iterable[dict],
        shared: dict | None = None,
        plugins_from: list[str] = (),
        catalog: dict | None = None,
        accuracy: dict[str, dict] | None = None,
    ) -> None:
        """run.json: the suite, the provenance, the manifest of the run's units, the items shared by models, what
        the units recorded of each model (``model_info``: held-out accuracy, training budget) and where the suite's
        plugins were found (:func:`~faithbench.bench.run.suite_files.plugin_folders`) and the registries' names and
        orders its report reads (``catalog``: :mod:`faithbench.bench.store.run_catalog`); ``accuracy``: each model's
        held-out accuracy on the run's data, as ``models[name]["run_accuracy"]``."""
        units = list(units)
        manifest = [{"model": u["model"], "method": u["method"], "key": u["key"]} for u in units]
        models = {u["model"]: dict(u["model_info"]) for u in units if u.get("model_info")}  # held-out accuracy, budget
        for name, record in (accuracy or {}).items():
            models.setdefault(name, {})["run_accuracy"] = record
        record = {"suite": suite, "provenance": prov, "units": manifest, **({"shared": shared} if shared else {})}
        record |= {"models": models} if models else {}
        record |= {"plugin_folders": list(plugins_from)} if plugins_from else {}
        record |= {"catalog": catalog} if catalog else {}
        atomic_write_text(self.out / "run.json", json.dumps(record, indent=2))

    def read_record(self) -> dict:
        """run.json, or a one-line error naming it."""
        path = self.out / "run.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"{self.out} is not a run folder: {path} is unreadable ({exc})") from None
        if not isinstance(record, dict) or "suite" not in record:
            raise UserError(f"{self.out} is not a run folder: {path} has no suite")
        return record

    def run_units(self, record: dict | None = None) -> list[dict]:
        """Exactly the units of the run that ``run.json`` describes, read from ``units/``.

        A unit file that is missing, unreadable or holds another key (a later run into the same folder
        replaced it) is a one-line error naming the file: the run's tables and its units disagree."""
        record = self.read_record() if record is None else record
        if "units" not in record:
            raise UserError(
                f"{self.out / 'run.json'} lists no units (a run folder written before faithbench recorded its "
                "units): run the same `bench run` command into it again to record them (finished units are reused)"
            )
        units = []
        for entry in record["units"]:
            path = self.unit_path(entry["model"], entry["method"])
            try:
                unit = json.loads(path.read_text())
            except OSError as exc:
                raise UserError(f"unit file {path} of this run cannot be read ({exc.strerror}); {_RERUN}") from None
            except json.JSONDecodeError as exc:
                msg = f"unit file {path} of this run is not valid JSON (truncated?: {exc}); {_RERUN}"
                raise UserError(msg) from None
            if unit.get("key") != entry["key"]:
                raise UserError(
                    f"unit file {path} holds another computation than the run in {self.out / 'run.json'} "
                    f"(another run wrote it since); {_RERUN}"
                )
            units.append(unit)
        return units

    def maps_path(self, model: str, method: str, rank: int = 0) -> Path:
        return self.out / "maps" / f"{model}__{method}{f'.rank{rank}' if rank else ''}.pt"

    def save_maps(self, model: str, method: str, key: str, state: dict, rank: int = 0) -> None:
        """A unit's attribution maps (a :class:`faithbench.metrics.mapstore.MapStore` state) under the unit's key."""
        atomic_torch_save(self.maps_path(model, method, rank), {"key": key, **state})

    def load_maps(self, model: str, method: str, key: str) -> list[dict]:
        """The stored map states of a unit (one per rank that computed it); [] if none match ``key``."""
        states = []
        for path in sorted((self.out / "maps").glob(f"{model}__{method}*.pt")):
            if path.stem.split(".rank")[0] != f"{model}__{method}":
                continue
            try:
                state = load_torch(path)
            except Exception:  # an unreadable file is as good as none: the unit cannot be re-scored
                continue
            if state.get("key") == key:
                states.append(state)
        return states

    def write_tables(self, units: Iterable[dict], suite: str) -> pd.DataFrame:
        """Rebuild results.csv, samples.csv and curves.csv from finished units; returns the results (each row carries
        the provenance recorded when its unit was computed). A unit's rows are formatted once per store
        (:class:`~faithbench.bench.store.tidy.Tables`): the runner rewrites the tables as units finish."""
        return self.tables.write(units, suite)
