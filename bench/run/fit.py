"""The run's models against its data, before any unit: a user's image model (``wrap_model``) must fit it (channels,
image size and class count, :func:`faithbench.models.user_checks.check_fit`), and every model gets one line of
held-out accuracy on the run's own data (recorded in run.json), so that a wrong normalisation, label order or a
collapsed model shows before the run spends its time, and ``compare`` can fail a model that collapsed."""

from __future__ import annotations

import sys

import torch

from faithbench.bench.run.suite import Suite
from faithbench.bench.store.accuracy import accuracy_floor
from faithbench.models import MODELS, load_model
from faithbench.models.data.datasets import DATASETS, EvalData
from faithbench.models.user import SOURCE
from faithbench.models.user_checks import check_fit

ACCURACY_IMAGES = 512  # held-out items of the accuracy line (the first of the data set)


def check_own_models(suite: Suite, data: EvalData, device: torch.device) -> None:
    """Refuse a user's image model that does not fit ``data`` (one line each), before any zoo build or unit."""
    spec = DATASETS.get(suite.dataset)
    own = [m for m in suite.models if MODELS.get(m).source == SOURCE and MODELS.get(m).modality == "image"]
    n_labels = int(data.labels.max()) + 1
    for name in own:
        model = load_model(name, device=device)
        check_fit(
            name,
            channels=model.encoding.image_channels,
            input_size=model.input_size,
            num_classes=model.num_classes,
            dataset=spec.name,
            data_channels=spec.channels if spec.channels is not None else int(data.images.shape[1]),
            data_size=spec.image_size,
            n_labels=n_labels,
        )


def held_out_accuracy(suite: Suite, data: EvalData, device: torch.device, batch: int) -> dict[str, dict]:
    """Every model's accuracy on the first :data:`ACCURACY_IMAGES` items of the run's data, one line each (a model
    not above :func:`accuracy_floor` is said to be so): model name -> ``{"correct", "n", "chance", "data"}``."""
    spec = DATASETS.get(suite.dataset)
    items = "images" if spec.modality == "image" else "texts"
    inputs, labels = data.images[:ACCURACY_IMAGES], data.labels[:ACCURACY_IMAGES]
    n = len(labels)
    if n == 0:
        return {}
    chance = float(torch.bincount(labels).max().item()) / n
    out = {}
    for name in suite.models:
        model = load_model(name, device=device)
        with torch.no_grad():
            correct = int((model.predict_logits(inputs, batch, device).argmax(dim=1) == labels).sum().item())
        out[name] = {"correct": correct, "n": n, "chance": chance, "data": data.name}
        floor = accuracy_floor(chance, n)
        low = (
            f"; NOT above chance (floor {100 * floor:.1f} %): its scores describe a broken classifier, "
            "and `compare` fails it as ACCURACY"
            if correct / n <= floor
            else ""
        )
        sys.stderr.write(
            f"model {name}: {100 * correct / n:.1f} % of {n} held-out {items} of {spec.name} right "
            f"(chance {100 * chance:.1f} %){low}\n"
        )
    return out
