"""The run's plan: the jobs a suite asks for (every method, control and rerun, as typed records), and what a
unit's scores depend on, as keys: the plan key (known before its model loads), the unit key (plus the model's
weights and the items it shares with other models), and how many planned units a folder holds."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithbench.attributions import CONTROLS, METHODS
from faithbench.bench.provenance import code_identity, is_own_file
from faithbench.bench.results import JOB_COLUMNS, RunStore
from faithbench.bench.suite import Suite


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

    @property
    def columns(self) -> dict[str, Any]:
        """What the result rows record of the job besides its name."""
        return {c: getattr(self, c) for c in JOB_COLUMNS}


def jobs(suite: Suite) -> list[Job]:
    """What the runner evaluates: every method and control, then every seeded one again per
    ``rerun_seeds`` entry (named ``METHOD@seedN``)."""
    base = [
        Job(name=m, method=m, params=dict(suite.method_params.get(m, {})), is_control=m in CONTROLS)
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
    ``.py`` file in it) and the file of the method's class when it is not faithbench's own."""
    files = []
    for name in suite.plugins:
        module = sys.modules.get(name)
        path = Path(getattr(module, "__file__", "") or "")
        if path.name == "__init__.py":
            files += sorted(path.parent.rglob("*.py"))
        elif path.name:
            files.append(path)
    try:
        method_file = inspect.getsourcefile(type(method))
    except TypeError:  # a class defined where no file backs it (a notebook cell, exec): nothing to hash
        method_file = None
    if method_file and not is_own_file(method_file):
        files.append(Path(method_file))
    return files


def plan_key(suite: Suite, model_name: str, method: str, method_params: dict, plugins: str = "") -> str:
    """What a unit's scores depend on that is known before its model loads: the suite's evaluation
    settings, the model's name, the method and its parameters, faithbench's code and the plugins' code."""
    payload = {
        "settings": suite.evaluation_settings(),
        "model": model_name,
        "method": method,
        "method_params": method_params,
        "code": code_identity(),
        "plugins": plugins,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def unit_key(plan: str, weights_sha256: str, shared: str = "") -> str:
    """The resume key of a unit: its plan key, its model's weights and (when a metric shares its items across
    models, :mod:`faithbench.bench.pairing`) the digest of the shared items."""
    return hashlib.sha256(f"{plan}:{weights_sha256}{f':{shared}' if shared else ''}".encode()).hexdigest()


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
