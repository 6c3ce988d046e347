"""The image sets the zoo trains on, by name: a recipe's ``dataset`` picks its (train, test) split."""

from __future__ import annotations

from functools import lru_cache

from faithbench.models.data.animal_mnist import animal_splits
from faithbench.models.data.mnist import Split, mnist_splits

IMAGE_SPLITS = {"mnist": mnist_splits, "animal-mnist": animal_splits}


@lru_cache(maxsize=len(IMAGE_SPLITS))
def image_splits(dataset: str = "mnist") -> tuple[Split, Split]:
    """(train, test) of the zoo's image set ``dataset`` (one of :data:`IMAGE_SPLITS`)."""
    if dataset not in IMAGE_SPLITS:
        raise ValueError(f"no zoo image set {dataset!r}; valid: {', '.join(IMAGE_SPLITS)}")
    return IMAGE_SPLITS[dataset]()
