"""The zoo's offline image sets: MNIST-5k and animal-mnist, split by name."""

import hashlib

import numpy as np
import pytest
import torch

from faithbench.models.data.animal_mnist import ANIMAL_CLASSES, FILE
from faithbench.models.data.datasets import DATASETS
from faithbench.models.data.splits import IMAGE_SPLITS, image_splits


def test_animal_mnist_is_the_vendored_file_deduplicated_and_split_by_class():
    assert hashlib.sha256(FILE.read_bytes()).hexdigest().startswith("203a5a4bdbddfa72")  # files/NOTICE
    train, test = image_splits("animal-mnist")
    assert train.images.shape == (7716, 1, 28, 28) and test.images.shape == (2000, 1, 28, 28)
    assert test.labels.bincount().tolist() == [200] * len(ANIMAL_CLASSES)
    assert train.images.dtype == torch.float32 and 0 <= train.images.min() and train.images.max() <= 1
    # the 284 exact duplicates are gone: no image twice, so none in both halves
    flat = torch.cat([train.images, test.images]).flatten(1).numpy()
    assert len(np.unique(flat, axis=0)) == len(flat)


def test_mnist_split_is_unchanged_by_the_shared_splitter():
    train, test = image_splits("mnist")
    assert (len(train.labels), len(test.labels)) == (4000, 1000)
    assert test.labels.bincount().tolist() == [100] * 10
    # the held-out digits every zoo checkpoint's accuracy was measured on (digest of the split before the refactor)
    digest = hashlib.sha256(test.images.numpy().tobytes() + test.labels.numpy().tobytes()).hexdigest()
    assert digest.startswith("4a8395b3556f3202")


def test_an_unknown_image_set_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: mnist, animal-mnist"):
        image_splits("cifar")


@pytest.mark.parametrize("name", sorted(IMAGE_SPLITS))
def test_every_zoo_image_set_is_a_suite_dataset(name):
    spec = DATASETS.get(name)
    assert spec.zoo and spec.modality == "image"
    data = spec.load(None)
    assert len(data.labels) == len(image_splits(name)[1].labels)
