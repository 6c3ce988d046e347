"""Declarative suites: TOML files under ``bench/suites/`` (adding a suite is adding a file).

A suite names its data set, models, methods and metrics, the sample counts, one table of settings per metric family
(each metric's typed config, named by its spec's ``table``) and per-method parameters (``[method_params.NAME]``).
Loading validates all of it -- every name, key, value, method parameter -- before any model or data is touched, and
each problem is one line that names the file and the key.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from faithbench.attributions import CORRUPTION_CONTROLS, METHODS, get_method
from faithbench.attributions import RUN_CONTROLS as CONTROLS
from faithbench.bench.run.data import text_tokenizer
from faithbench.bench.run.suite_files import import_plugins, suite_path, tiers
from faithbench.calls import AUTO
from faithbench.config import from_table, to_dict
from faithbench.errors import ParameterError, UserError
from faithbench.metrics.baselines import TEXT_BASELINES
from faithbench.metrics.registry import METRICS
from faithbench.models import MODELS
from faithbench.models.data.datasets import CLASS_INDEX, DATASETS
from faithbench.models.user import SOURCE as USER_SOURCE
from faithbench.models.zoo.builds import with_builds

SCALARS = {  # key: (type, smallest value or None)
    "name": (str, None),
    "description": (str, None),
    "dataset": (str, None),
    "data_root": (str, None),
    "class_index": (str, None),
    "seed": (int, 0),
    "n_samples": (int, 1),
    "batch_size": (int, 1),
    "max_batch": (int, 1),
    "store_maps": (bool, None),
    "pieces": (int, 1),
    "builds": (int, 1),
}
LISTS = ("models", "methods", "metrics", "plugins", "controls", "rerun_seeds", "tiers")


@dataclass(frozen=True)
class Suite:
    """One validated benchmark configuration, a plain record: every name in it was checked against the
    registries when it was built, and its fields are recorded with the results.

    ``configs`` maps a table name to its metric config (those of the selected metrics, defaults
    filled in, and any other table the file gives); ``metric_tables`` names each selected metric's table
    (None: the metric has no settings). What the run does with it is :func:`faithbench.bench.run.plan.resolve`.
    """

    name: str
    models: tuple[str, ...]
    methods: tuple[str, ...]
    metrics: tuple[str, ...]
    description: str = ""
    dataset: str = "mnist"
    data_root: str | None = None
    class_index: str = "auto"  # class folders -> labels: auto | sorted | imagenet | a file (bench.run.data)
    seed: int = 0
    n_samples: int = 64
    batch_size: int = 64
    # inputs per model call at most, for every method and metric: auto = 256 on the CPU, from 16384 down on a GPU by
    # trying (faithbench.calls; not in the resume key: memory only)
    max_batch: int | str = AUTO
    store_maps: bool = True  # keep every unit's maps for ``bench rescore`` (not in the resume key)
    pieces: int = 1  # each unit split into this many pieces that workers share (bench.store.pieces)
    builds: int = 1  # each zoo model as builds 1 .. N (NAME, NAME@2, ...: models.zoo.builds), listed in models
    configs: Mapping[str, Any] = field(default_factory=dict)
    method_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()  # control explainers run beside the methods (``controls = true``: all of them)
    rerun_seeds: tuple[int, ...] = ()  # seeded methods run again with each of these seeds (rerun agreement)
    tiers: tuple[str, ...] = ()  # suites run after this one, each into OUT/NAME (the ground-truth tier: ``truth``)
    modality: str = "image"  # the data set's (resolved)
    metric_tables: Mapping[str, str | None] = field(default_factory=dict)  # metric -> its settings table (resolved)

    @property
    def all_methods(self) -> tuple[str, ...]:
        """The methods and then the controls, each once."""
        return tuple(dict.fromkeys([*self.methods, *self.controls]))

    def to_dict(self) -> dict[str, Any]:
        """The suite as TOML-shaped data (tables as top-level keys); ``build_suite`` reads it back."""
        data: dict[str, Any] = {k: getattr(self, k) for k in SCALARS if getattr(self, k) is not None}
        data.update({k: list(getattr(self, k)) for k in LISTS})
        data.update({table: to_dict(cfg) for table, cfg in self.configs.items()})
        data["method_params"] = {m: dict(p) for m, p in self.method_params.items()}
        return data


def _scalar(data: Mapping[str, Any], key: str, where: str) -> Any:
    kind, least = SCALARS[key]
    value = data[key]
    auto = getattr(Suite, key, None) == AUTO  # a key whose default is auto takes auto or a value (as method parameters)
    if auto and value == AUTO:
        return value
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        either = f' or "{AUTO}"' if auto else ""
        raise UserError(f"{where} {key} must be a {kind.__name__}{either}, got {value!r}")
    if least is not None and value < least:
        raise UserError(f"{where} {key} must be >= {least}, got {value!r}")
    return value


RETIRED = {"pool_calls": "removed: each metric calls the model on its own"}  # keys older suites and runs carry


def recorded_suite(record: Mapping[str, Any], run_json: Path) -> Suite:
    """The suite a run's ``run.json`` records, its plugins imported from where the run found them."""
    for folder in record.get("plugin_folders", []):
        if folder not in sys.path:
            sys.path.append(folder)
    return build_suite(record["suite"], str(run_json))


def build_suite(data: Mapping[str, Any], source: str = "suite", folder: Path | None = None) -> Suite:
    """Validate TOML-shaped suite data and build the :class:`Suite` (see the module docstring)."""

    where = f"{source}:"
    for key in set(data) & set(RETIRED) if "run.json" not in where else ():  # a run recorded before: as it ran
        print(f"[faithbench] {where} {key} ignored ({RETIRED[key]})", file=sys.stderr)
    data = {k: v for k, v in data.items() if k not in RETIRED}
    plugins = import_plugins(data.get("plugins", []), where, folder)
    specs = [METRICS.get(m) for m in METRICS]
    tables = {s.table: s.config for s in specs if s.table}
    data = _tables_by_metric(data, {s.name: s.table for s in specs if s.table}, where)
    unknown = sorted(set(data) - set(SCALARS) - set(LISTS) - set(tables) - {"method_params"})
    if unknown:
        raise UserError(
            f"{where} unknown key(s) {', '.join(unknown)}; valid keys: {', '.join([*SCALARS, *LISTS])}; "
            f"tables: {', '.join([*tables, 'method_params'])} (or a metric's name for its table)"
        )
    for key in ("name", "models", "methods", "metrics"):
        if key not in data:
            raise UserError(f"{where} missing key {key!r}")
    controls = _controls(data.get("controls", False), where)
    rerun_seeds = data.get("rerun_seeds", [])
    if not isinstance(rerun_seeds, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in rerun_seeds
    ):
        raise UserError(f"{where} rerun_seeds must be a list of integers >= 0, got {rerun_seeds!r}")
    tier_names = tiers(data.get("tiers", []), data.get("name"), where, folder)
    values = {k: _scalar(data, k, where) for k in SCALARS if k in data}
    for key in ("data_root", "class_index"):  # a suite file's paths mean beside it, as its plugins
        given = values.get(key)
        if folder is not None and given and given not in CLASS_INDEX and not Path(given).expanduser().is_absolute():
            values[key] = str(folder / given)
    models = MODELS.require(data["models"], f"{where} models")
    models = with_builds(models, values.get("builds", 1), MODELS.__contains__, where)
    methods = METHODS.require(data["methods"], f"{where} methods")
    metrics = METRICS.require(data["metrics"], f"{where} metrics")
    for kind, names in (("model", models), ("method", methods), ("metric", metrics)):
        if not names:
            raise UserError(f"{where} the suite selects no {kind}")
    dataset = DATASETS.get(values.get("dataset", Suite.dataset))

    blocked = [(m, METRICS.get(m).availability(dataset.modality)) for m in metrics]
    blocked = [(m, why) for m, why in blocked if why]
    if blocked:
        usable = [m for m in METRICS if not METRICS.get(m).availability(dataset.modality)]
        reasons = "; ".join(f"metric {m!r} is {why}" for m, why in blocked)
        raise UserError(
            f"{where} {reasons} (dataset {dataset.name!r} is {dataset.modality}); metrics for {dataset.modality} "
            f"suites: {', '.join(usable)}"
        )

    configs = {t: from_table(cls, data[t], f"{where} [{t}]") for t, cls in tables.items() if t in data}
    for m in metrics:
        table = METRICS.get(m).table
        if table and table not in configs:
            configs[table] = tables[table]()
    for t, cfg in configs.items():  # data-derived defaults (a block size from the image side), degenerate ones refused
        if dataset.image_size and hasattr(cfg, "for_image"):
            try:
                configs[t] = cfg.for_image(dataset.image_size)
            except ValueError as exc:
                raise UserError(f"{where} [{t}] on dataset {dataset.name!r}: {exc}") from None
    if dataset.modality == "text":  # the image default (the data's mean colour) has no text form: the B-cos LM code's
        for t, cfg in configs.items():
            if getattr(cfg, "baseline", None) == "mean" and "baseline" not in data.get(t, {}):
                configs[t] = replace(cfg, baseline=TEXT_BASELINES[0])

    method_params = data.get("method_params", {})
    if not isinstance(method_params, Mapping):
        raise UserError(f"{where} method_params must be tables [method_params.NAME], got {method_params!r}")
    METHODS.require(list(method_params), f"{where} method_params")
    for name in dict.fromkeys([*methods, *method_params]):
        params = method_params.get(name, {})
        if not isinstance(params, Mapping):
            raise UserError(f"{where} [method_params.{name}] must be a table, got {params!r}")
        try:
            get_method(name, **params)
        except ParameterError as exc:
            raise UserError(f"{where} [method_params.{name}]: {exc}") from None

    for m in models:
        spec = MODELS.get(m)
        if spec.modality != dataset.modality:
            same = [
                n for n, sp in MODELS.items() if sp.modality == dataset.modality and sp.dataset in (None, dataset.name)
            ]
            kind = f"{'an' if spec.modality == 'image' else 'a'} {spec.modality}"
            raise UserError(
                f"{where} model {m!r} is {kind} model and dataset {dataset.name!r} is {dataset.modality}; "
                f"models for it: {', '.join(same)}"
            )
        if spec.dataset not in (None, dataset.name) and (spec.modality == "text" or dataset.zoo):
            raise UserError(
                f"{where} model {m!r} predicts the classes of dataset {spec.dataset!r}, not {dataset.name!r}"
            )
    text_tokenizer(models, where)
    zoo = [m for m in models if MODELS.get(m).source == "zoo" and MODELS.get(m).modality == "image"]
    if zoo and not dataset.zoo:
        raise UserError(
            f"{where} the zoo models {', '.join(zoo)} classify the zoo's 28 px images (mnist, animal-mnist); "
            f"with dataset {dataset.name!r} choose pretrained models, e.g. --models resnet18,bcos_resnet18"
        )
    own = [m for m in models if MODELS.get(m).source == USER_SOURCE]  # wrap_model: the user knows what it reads
    if dataset.zoo and len(zoo) + len(own) < len(models):
        other = [m for m in models if m not in zoo and m not in own]
        raise UserError(
            f"{where} models {', '.join(other)} need real data: pass --data-root (an ImageNet-style folder)"
        )
    method_params = _corruption_bases([*methods, *controls], method_params, where)
    return Suite(
        models=models,
        methods=methods,
        metrics=metrics,
        configs=configs,
        method_params={k: dict(v) for k, v in method_params.items()},
        plugins=plugins,
        controls=controls,
        rerun_seeds=tuple(dict.fromkeys(rerun_seeds)),
        tiers=tier_names,
        modality=dataset.modality,
        metric_tables={m: METRICS.get(m).table for m in metrics},
        **values,
    )


def _tables_by_metric(data: Mapping[str, Any], table_of: Mapping[str, str], where: str) -> dict[str, Any]:
    """A settings table may be named by a metric that reads it (a table named by an insertion metric is its
    ``[deletion]``)."""
    out = {k: v for k, v in data.items() if k not in table_of or k in table_of.values()}
    for metric in (k for k in data if k in table_of and k not in table_of.values()):
        table, given = table_of[metric], data[metric]
        if not isinstance(given, Mapping):
            raise UserError(f"{where} {metric} must be a table of settings (its [{table}]), got {given!r}")
        clash = [k for k in given if k in out.get(table, {}) and out[table][k] != given[k]]
        if clash:
            raise UserError(f"{where} {metric} and [{table}] (the same table) set {', '.join(clash)} differently")
        out[table] = {**out.get(table, {}), **given}
    return out


def _controls(value: object, where: str) -> tuple[str, ...]:
    """``controls = true``: every control explainer; ``false`` (the default, as in ``benchmark()`` and a command-line
    question): none; or a list of them."""

    if value is True:
        return CONTROLS
    if value is False:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where} controls must be true, false or a list of {', '.join(CONTROLS)}; got {value!r}")
    unknown = [v for v in value if v not in CONTROLS]
    if unknown:
        raise UserError(f"{where} unknown control(s) {', '.join(unknown)}; valid controls: {', '.join(CONTROLS)}")
    return tuple(dict.fromkeys(value))


def _corruption_bases(names: list[str], method_params: Mapping, where: str) -> dict:
    """A corruption control explains with its method ``of`` at the suite's ``[method_params.<of>]`` (its
    ``of_params``, filled in here): the report card pairs it with the run's own maps of ``of``. Given explicitly,
    ``of_params`` must equal the suite's (maps of other settings would be paired). Returns the filled copy."""
    method_params = {k: dict(v) for k, v in method_params.items()}
    for name in (n for n in names if n in CORRUPTION_CONTROLS):
        own = method_params.get(name, {})
        of = own.get("of", METHODS.get(name).defaults["of"])
        suite_params = dict(method_params.get(of, {}))
        if "of_params" not in own:
            if suite_params:  # else nothing is recorded: the base runs at its defaults, as before
                method_params[name] = {**own, "of_params": suite_params}
        elif own["of_params"] != suite_params:
            raise UserError(
                f"{where} control {name!r} corrupts {of!r} with of_params {own['of_params']!r}, but the suite runs "
                f"{of!r} with {suite_params or 'its defaults'}: the card would pair maps of different settings; drop "
                f"of_params (the suite's are used)"
            )
    return method_params


def load_suite(name_or_path: str) -> Suite:
    """A suite by name (``bench/suites/NAME.toml``) or from a TOML file path."""
    path = suite_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"suite file {path} is not valid TOML: {exc}") from None
    return build_suite(data, str(path), path.resolve().parent)


def with_overrides(suite: Suite, tables: Mapping[str, Mapping[str, Any]] | None = None, **overrides: Any) -> Suite:
    """The suite with command-line overrides (None = keep), validated again; table keys are merged."""
    data = suite.to_dict()
    for key, value in overrides.items():
        if value is not None:
            data[key] = list(value) if key in LISTS and not isinstance(value, bool) else value
    for table, values in (tables or {}).items():
        if values:
            data[table] = {**data.get(table, {}), **values}
    return replace(build_suite(data, f"suite {suite.name!r}"), description=suite.description)
