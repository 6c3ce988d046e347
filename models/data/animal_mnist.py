"""animal-mnist 0.4 (MIT): 10,000 animal silhouettes at 28 px, 10 classes of 1,000, vendored in ``files/``.

A second offline image set, off MNIST's accuracy ceiling (the papers' accuracy trade-offs show here). The images
are white silhouettes on black, like MNIST's digits, so every digit model's geometry and encoding apply. The
package itself declares tensorflow, so its two arrays ship here (``files/animal_mnist.npz``; ``files/NOTICE``).
Its 284 exact duplicates are dropped (the first copy kept) before the split, so no image is in both halves; then
200 images of each class (2,000) are held out, stratified and seeded, and the other 7,716 train.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from faithbench.models.data.mnist import Split, stratified_split

ANIMAL_CLASSES = ("bear", "bird", "cat", "cow", "dog", "elephant", "giraffe", "horse", "sheep", "zebra")
FILE = Path(__file__).parent / "files" / "animal_mnist.npz"


@lru_cache(maxsize=1)
def _animal_arrays() -> tuple[np.ndarray, np.ndarray]:
    with np.load(FILE, allow_pickle=False) as f:
        x, y = f["images"], f["labels"]
    _, first = np.unique(x.reshape(len(x), -1), axis=0, return_index=True)
    keep = np.sort(first)  # one copy of every distinct image, in the file's order
    return x[keep].astype(np.float32)[:, None] / 255.0, y[keep].astype(np.int64)


def animal_splits(test_per_class: int = 200, seed: int = 0) -> tuple[Split, Split]:
    """(train, test): ``test_per_class`` images of each animal held out, chosen with ``seed``."""
    return stratified_split(*_animal_arrays(), test_per_class=test_per_class, seed=seed)
