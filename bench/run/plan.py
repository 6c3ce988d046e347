"""The run's plan: what a suite asks for, resolved once before any model loads -- every method, control and
rerun as a typed :class:`Job` (its class and normalised parameters), every metric with its spec and config
(:class:`MetricJob`), the example metric, and each (model, job)'s plan key -- so that the runner walks the plan
and consults no registry. Also the keys of a unit's scores: the plan key (known before its model loads), the
unit key (plus the model's weights and the items it shares with other models), and how many planned units a
folder holds."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from faithbench.attributions import ALL_CONTROLS, METHODS, AttributionMethod
from faithbench.bench.run.provenance import code_identity, is_own_file, source_identity
from faithbench.bench.run.suite import Suite, load_suite, with_overrides
from faithbench.bench.run.user_code import user_sources
from faithbench.bench.store.results import RunStore, tier_folder
from faithbench.bench.store.tidy import JOB_COLUMNS
from faithbench.build_names import build_name, split_build
from faithbench.config import to_dict
from faithbench.errors import UserError
from faithbench.metrics.grids import SHARED_BY_BUILD
from faithbench.metrics.registry import METRICS
from faithbench.metrics.spec import MetricSpec
from faithbench.models.data.datasets import DATASETS
from faithbench.models.registry import MODELS


@dataclass(frozen=True, kw_only=True)
class Job:
    """One method the runner evaluates on every model: ``name`` is its rows' ``method`` (a rerun's is
    ``METHOD@seedN``, made here and never parsed: ``rerun_of`` and ``rerun_seed`` say what it is)."""

    name: str
    method: str  # the registered method
    params: dict[str, Any]
    is_control: bool = False
    rerun_of: str | None = None
    rerun_seed: int | None = None

    method_class: type[AttributionMethod] | None = field(default=None, compare=False, repr=False)  # resolved

    @property
    def columns(self) -> dict[str, Any]:
        """What the result rows record of the job besides its name."""
        return {c: getattr(self, c) for c in JOB_COLUMNS}

    def build(self) -> AttributionMethod:
        """A fresh instance of the job's method (one per unit: a method may keep state for its model)."""
        cls = self.method_class or METHODS.get(self.method)
        return cls(**self.params)


@dataclass(frozen=True, kw_only=True)
class MetricJob:
    """A metric of the suite, resolved: its spec and its typed config."""

    name: str
    spec: MetricSpec
    config: Any
    deciders: tuple[str, ...] = ()  # the models that choose every model's items (spec.pairing); none: each its own
    by_build: bool = False  # the deciders share items within each build only (pairing = "shared-by-build")

    def groups(self) -> dict[str, tuple[str, ...]]:
        """The deciders' groups by the key of their shared items: one group under the metric's name, or (by build)
        build K's models under ``METRIC@K`` (build 1's under the name)."""
        if not self.deciders:
            return {}
        if not self.by_build:
            return {self.name: self.deciders}
        out: dict[str, tuple[str, ...]] = {}
        for model in self.deciders:
            key = build_name(self.name, max(split_build(model)[1], 1))
            out[key] = (*out.get(key, ()), model)
        return out


@dataclass(frozen=True, kw_only=True)
class Tier:
    """A suite run after the main one into a sub-folder of its run (e.g. the ground-truth tier), at the run's seed."""

    name: str  # as the suite lists it: a shipped suite's name or a file
    folder: str  # the sub-folder of the run
    plan: Plan


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Everything the runner needs from the suite, resolved: ``keys[(model, job name)]`` is the unit's plan key."""

    suite: Suite
    jobs: tuple[Job, ...]
    metrics: tuple[MetricJob, ...]
    keys: dict[tuple[str, str], str]
    tiers: tuple[Tier, ...] = ()  # the suites run after this one, each resolved once here
    record: dict[str, Any]  # the suite as run.json records it (Suite.to_dict)
    run_id: str  # what makes two workers part of the same run (:func:`run_id`)
    example: MetricJob | None  # the first metric that offers an example for the report's panel (None: none)


def metric_jobs(suite: Suite) -> tuple[MetricJob, ...]:
    """The suite's metrics with their specs, configs (a metric without a settings table: its defaults) and the
    models that decide their shared items (a suite the metric cannot pair is refused here, before any model loads)."""
    families = {name: MODELS.get(name).family for name in suite.models}
    out = []
    for name in suite.metrics:
        spec, table = METRICS.get(name), suite.metric_tables.get(name)
        config = suite.configs[table] if table else spec.config()
        if spec.refuses and (reason := spec.refuses(config)):
            raise UserError(f"{suite.name}: {reason}")
        deciders = tuple(spec.pairing(config, families)) if spec.pairing else ()
        by_build = getattr(config, "pairing", None) == SHARED_BY_BUILD
        out.append(MetricJob(name=name, spec=spec, config=config, deciders=deciders, by_build=by_build))
    return tuple(out)


def resolve(suite: Suite) -> Plan:
    """Resolve ``suite`` into the runner's plan: jobs, metric configs and every (model, job)'s plan key (each method is
    built once here to normalise its parameters and to find a plugin's source)."""
    resolved, keys, settings = [], {}, evaluation_settings(suite)
    model_code = {name: user_sources([MODELS.get(name).build]) for name in suite.models}  # a user model's modules
    for job in jobs(suite):
        method = job.build()
        resolved.append(replace(job, method_class=type(method)))
        files = plugin_sources(suite, method)  # found once per method, not per model
        for model_name in suite.models:
            plugins = source_identity(files + model_code[model_name])
            keys[(model_name, job.name)] = plan_key(settings, model_name, job.name, method.protocol_params, plugins)
    tiers = tuple(
        Tier(name=t, folder=tier_folder(t), plan=resolve(with_overrides(load_suite(t), seed=suite.seed)))
        for t in suite.tiers
    )
    metrics, record = metric_jobs(suite), suite.to_dict()
    return Plan(
        suite=suite, jobs=tuple(resolved), metrics=metrics, keys=keys, tiers=tiers, record=record,
        run_id=run_id(record, keys), example=next((m for m in metrics if m.spec.example is not None), None),
    )  # fmt: skip


def jobs(suite: Suite) -> list[Job]:
    """What the runner evaluates: every method and control, then every seeded one again per
    ``rerun_seeds`` entry (named ``METHOD@seedN``)."""
    base = [
        Job(name=m, method=m, params=dict(suite.method_params.get(m, {})), is_control=m in ALL_CONTROLS)
        for m in suite.all_methods
    ]
    reruns = [
        Job(
            name=f"{job.name}@seed{seed}",
            method=job.method,
            params={**job.params, "seed": seed},
            is_control=job.is_control,
            rerun_of=job.name,
            rerun_seed=seed,
        )
        for job in base
        if METHODS.get(job.method).capabilities.seeded
        for seed in suite.rerun_seeds
    ]
    return base + reruns


def plugin_sources(suite: Suite, method: Any) -> list[Path]:
    """Source files of code outside faithbench that a unit runs: the suite's plugin modules (a package: every
    ``.py`` file in it), the file of the method's class when it is not faithbench's own, and every user module
    these import or take a name from (:func:`~faithbench.bench.run.user_code.user_sources`)."""
    files, modules = [], [sys.modules[name] for name in suite.plugins if name in sys.modules]
    for module in modules:
        path = Path(getattr(module, "__file__", "") or "")
        if path.name == "__init__.py":
            files += sorted(path.parent.rglob("*.py"))
        elif path.name:
            files.append(path)
    try:
        method_file = inspect.getsourcefile(type(method))
    except (TypeError, OSError):  # a class defined where no file backs it (a notebook cell, exec): nothing to hash
        method_file = None
    if method_file and not is_own_file(method_file):
        files.append(Path(method_file))
    return files + user_sources([*modules, type(method)])


def evaluation_settings(suite: Suite) -> dict[str, Any]:
    """What the scores of a unit depend on besides its model and method (part of the resume key)."""
    tables = {suite.metric_tables[m] for m in suite.metrics} - {None}
    return {
        "dataset": suite.dataset,
        "data_root": suite.data_root,
        **({"class_index": suite.class_index} if DATASETS.get(suite.dataset).class_folders else {}),
        "seed": suite.seed,
        "n_samples": suite.n_samples,
        "batch_size": suite.batch_size,
        "metrics": list(suite.metrics),
        "configs": {t: to_dict(suite.configs[t]) for t in sorted(tables)},
        # a piece explains its own batches: more pieces may round differently (1 keeps the keys of old runs)
        **({"pieces": suite.pieces} if suite.pieces != 1 else {}),
    }


def plan_key(settings: dict, model_name: str, method: str, method_params: dict, plugins: str = "") -> str:
    """What a unit's scores depend on that is known before its model loads: the suite's evaluation ``settings``
    (:func:`evaluation_settings`), the model's name, the method and its parameters (those its maps depend on:
    ``AttributionMethod.protocol_params``), faithbench's code and the plugins' code."""
    payload = {
        "settings": settings,
        "model": model_name,
        "method": method,
        "method_params": method_params,
        "code": code_identity(),
        "plugins": plugins,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def unit_key(plan: str, weights_sha256: str, shared: str = "") -> str:
    """The resume key of a unit: its plan key, its model's weights and (when a metric shares its items across
    models, :mod:`faithbench.bench.run.pairing`) the digest of the shared items."""
    return hashlib.sha256(f"{plan}:{weights_sha256}{f':{shared}' if shared else ''}".encode()).hexdigest()


def run_id(record: dict[str, Any], keys: dict[tuple[str, str], str]) -> str:
    """What makes two workers part of the same run: the suite as resolved (``record``) and every unit's plan key (the
    code and plugins included). Workers with the same id share a run folder; another run does not join it."""
    payload = {"suite": record, "keys": sorted(keys.values())}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resume_count(store: RunStore, plans: dict[tuple[str, str], str]) -> int:
    """How many of the planned (model, method) units the folder already holds for the same plan (their
    models' weights are checked when each model loads)."""
    if not store.units.is_dir():
        return 0
    found = 0
    for path in store.units.glob("*.json"):
        try:
            unit = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        plan = unit.get("plan_key")
        found += plan is not None and plans.get((unit.get("model"), unit.get("method"))) == plan
    return found
