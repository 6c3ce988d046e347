"""A question without a suite file: models x methods x metrics on a data set, at the library's defaults.

``benchmark()`` and ``python -m bench run --models ...`` without ``--suite`` both build their suite here, as a suite
file that names only these keys is built, so one question gets one number whichever way it is asked. The defaults
live in the config classes (:mod:`faithbench.config`): data-derived ones (a deletion block from the image side, LIME's
segmentation) are resolved for the data set, controls and tiers are off unless asked for. Left out, the methods and
metrics are those of the embedded default suite of the data's modality (``vision`` or ``text``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from typing import Any

from faithbench.bench.run.suite_files import SUITES
from faithbench.models import MODELS
from faithbench.models.data.datasets import DATASETS

DEFAULT_SUITES = {"image": "vision", "text": "text"}  # the embedded default of each modality: its lists fill gaps
FALLBACK_DATASET = "mnist"  # the offline zoo's digits, where nothing names a data set


def infer_dataset(models: Sequence[str], data_root: str | None = None) -> str:
    """The data set of a question: the one the named models were trained for (zoo and text models), the
    ImageNet-style folder where ``data_root`` is given, else the offline digits."""
    if data_root:
        return "imagefolder"
    known = [MODELS.get(m).dataset for m in models if m in MODELS]
    named = list(dict.fromkeys(d for d in known if d is not None))
    return named[0] if len(named) == 1 else FALLBACK_DATASET


def default_lists(dataset: str) -> dict[str, list[str]]:
    """The models, methods and metrics of the embedded default suite of ``dataset``'s modality."""
    data = tomllib.loads(SUITES.get(DEFAULT_SUITES[DATASETS.get(dataset).modality]).read_text())
    return {key: list(data[key]) for key in ("models", "methods", "metrics")}


def question(
    models: Sequence[str] | None,
    methods: Sequence[str] | None,
    metrics: Sequence[str] | None,
    *,
    dataset: str | None = None,
    data_root: str | None = None,
    name: str = "question",
    controls: bool | Sequence[str] = False,
    tiers: Sequence[str] = (),
    **settings: Any,
) -> dict[str, Any]:
    """The TOML-shaped suite data of a question (:func:`faithbench.bench.run.suite.build_suite` validates it):
    ``None`` lists come from the default suite of the data's modality; ``settings``: any other suite key or table."""
    dataset = dataset or infer_dataset(models or [], data_root)
    given = {"models": models, "methods": methods, "metrics": metrics}
    lists = default_lists(dataset) if dataset in DATASETS and None in given.values() else {}
    data: dict[str, Any] = {"name": name, "dataset": dataset}
    data |= {k: list(v) if v is not None else lists.get(k, []) for k, v in given.items()}
    data |= {"controls": controls if isinstance(controls, bool) else list(controls), "tiers": list(tiers)}
    if data_root is not None:
        data["data_root"] = data_root
    return data | settings
