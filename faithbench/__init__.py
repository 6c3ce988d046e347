"""faithbench: how faithful and how well-localised are the explanations of image and text classifiers.

One import root. The layers are sub-packages: :mod:`faithbench.models` (model adapters and the offline zoo),
:mod:`faithbench.attributions` (attribution methods), :mod:`faithbench.metrics` (batched metrics) and
:mod:`faithbench.bench` (suites, runner, results, reports, the command line). This module's own files are the
foundation every layer imports (the registry type, user errors, atomic file writes); it imports no layer
eagerly, so ``import faithbench`` stays light. The names below load their layer on first use::

    from faithbench import load_model, get_method, register_method, register_metric, run_suite
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

# In a source checkout the layers sit beside this folder (bench/, metrics/, models/, attributions/); an install
# maps them under faithbench (pyproject's package-dir). Adding the checkout to the search path makes a run from
# source (PYTHONPATH=checkout, no install) resolve faithbench.metrics to the same files an editable install does.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "metrics" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))

# name -> (module, attribute): the documented Python API, loaded on first access (PEP 562).
_API = {
    "load_model": ("faithbench.models", "load_model"),
    "bcosify": ("faithbench.models", "bcosify"),
    "ModelAdapter": ("faithbench.models", "ModelAdapter"),
    "ModelSpec": ("faithbench.models", "ModelSpec"),
    "MODELS": ("faithbench.models", "MODELS"),
    "AttributionMethod": ("faithbench.attributions", "AttributionMethod"),
    "get_method": ("faithbench.attributions", "get_method"),
    "register_method": ("faithbench.attributions", "register_method"),
    "METHODS": ("faithbench.attributions", "METHODS"),
    "METRICS": ("faithbench.metrics", "METRICS"),
    "register_metric": ("faithbench.metrics", "register_metric"),
    "MetricSpec": ("faithbench.metrics", "MetricSpec"),
    "wrap_model": ("faithbench.models", "wrap_model"),
    "wrap_text_model": ("faithbench.models", "wrap_text_model"),
    "torchvision_model": ("faithbench.models", "torchvision_model"),
    "timm_model": ("faithbench.models", "timm_model"),
    "benchmark": ("faithbench.bench.cli.api", "benchmark"),
    "statistics": ("faithbench.bench.cli.api", "statistics"),
    "samples": ("faithbench.bench.cli.api", "samples"),
    "score": ("faithbench.bench.run.score", "score"),
    "leaderboard": ("faithbench.bench.report.build", "leaderboard"),
    "load_suite": ("faithbench.bench.run.suite", "load_suite"),
    "run_suite": ("faithbench.bench.run.runner", "run"),
    "UserError": ("faithbench.errors", "UserError"),
    "Registry": ("faithbench.registry", "Registry"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'faithbench' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
