"""A user's models (``wrap_model``) against the run's data, before any unit: channels, image size and class count
(:func:`faithbench.models.user_checks.check_fit`), then one line of held-out accuracy each, so that a wrong
normalisation or label order shows before the run spends its time."""

from __future__ import annotations

import sys

import torch

from faithbench.bench.run.suite import Suite
from faithbench.models import MODELS, load_model
from faithbench.models.data.datasets import DATASETS, EvalData
from faithbench.models.user import SOURCE
from faithbench.models.user_checks import check_fit

ACCURACY_IMAGES = 512  # held-out images of the accuracy line (the first of the data set)


def check_own_models(suite: Suite, data: EvalData, device: torch.device, batch: int, say: bool = True) -> None:
    """Refuse a user's image model that does not fit ``data`` (one line each), then print its accuracy."""
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
        if say:
            images, labels = data.images[:ACCURACY_IMAGES], data.labels[:ACCURACY_IMAGES]
            right = (model.predict_logits(images, batch, device).argmax(dim=1) == labels).float().mean().item()
            sys.stderr.write(
                f"model {name}: {100 * right:.1f} % of {len(labels)} held-out images of {spec.name} right "
                f"(chance {100 / n_labels:.1f} %)\n"
            )
