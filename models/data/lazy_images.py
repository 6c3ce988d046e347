"""Images read from files when indexed: an ImageNet-style folder of thousands of photographs is not decoded into
memory up front (5,000 images at 224 px are 3 GB as float tensors, twice that while they are stacked).

:class:`LazyImages` indexes like the (N, C, H, W) float tensor in [0, 1] an evaluation set otherwise is: ``len``,
``shape``, ``images[ids]`` (an int, a slice, a list or an integer tensor of any shape) and the per-channel
``mean(dim=(0, 2, 3))``. Each file is decoded to uint8 (exact: ``float / 255`` is what torchvision's ``ToTensor``
returns) and the most recently used ``cached_images`` are kept, so a metric that reads the same images twice
(GridPG's predictions, then its grids) decodes them once when they fit.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor

CACHED_IMAGES = 2048  # decoded images kept (uint8): 2,048 at 224 px RGB are 300 MB
MEAN_CHUNK = 256  # images a step of the streamed mean holds as floats (150 MB at 224 px RGB)
DECODE_THREADS = 8  # at most; PIL releases the GIL while it decodes and resizes


class LazyImages:
    """(N, C, H, W) float32 images in [0, 1], decoded from ``files`` by ``decode`` (path -> (C, H, W) uint8) when
    indexed; the last ``cached_images`` decoded are kept."""

    def __init__(
        self,
        files: Sequence[str],
        decode: Callable[[str], Tensor],
        image_shape: tuple[int, int, int],
        *,
        cached_images: int = CACHED_IMAGES,
    ) -> None:
        if cached_images < 0:
            raise ValueError(f"cached_images must be >= 0, got {cached_images}")
        self.files, self.decode, self.cached_images = list(files), decode, cached_images
        self.shape = torch.Size((len(self.files), *image_shape))
        self.dtype, self.device = torch.float32, torch.device("cpu")
        self._cache: OrderedDict[int, Tensor] = OrderedDict()
        self._lock = threading.Lock()
        self._mean: Tensor | None = None

    def __len__(self) -> int:
        return self.shape[0]

    def dim(self) -> int:
        return 4

    def __repr__(self) -> str:
        return f"LazyImages({len(self)} files, image shape {tuple(self.shape[1:])}, {len(self._cache)} decoded)"

    def __getitem__(self, key: int | slice | Sequence[int] | Tensor) -> Tensor:
        if isinstance(key, bool):
            raise TypeError("LazyImages are indexed by integers, not a bool")
        if isinstance(key, int):
            return self._rows([self._check(key)])[0]
        if isinstance(key, slice):
            return self._rows(list(range(*key.indices(len(self)))))
        ids = torch.as_tensor(key)
        if ids.dtype == torch.bool or ids.is_floating_point():
            raise TypeError(f"LazyImages are indexed by integers (an int, a slice, an integer tensor), got {ids.dtype}")
        flat = [self._check(int(i)) for i in ids.flatten().tolist()]
        return self._rows(flat).reshape(*ids.shape, *self.shape[1:])

    def mean(self, dim: tuple[int, ...] = (0, 2, 3), keepdim: bool = False) -> Tensor:
        """The per-channel mean over every image and pixel (streamed, float64 sums; kept after the first call)."""
        if tuple(dim) != (0, 2, 3):
            raise ValueError(f"LazyImages give the per-channel mean only (dim=(0, 2, 3)), got dim={dim}")
        if self._mean is None:
            total = torch.zeros(self.shape[1], dtype=torch.float64)
            for start in range(0, len(self), MEAN_CHUNK):
                total += self[start : start + MEAN_CHUNK].sum(dim=(0, 2, 3), dtype=torch.float64)
            self._mean = (total / (len(self) * self.shape[2] * self.shape[3])).float()
        return self._mean.clone().reshape(1, -1, 1, 1) if keepdim else self._mean.clone()

    def _check(self, i: int) -> int:
        if not -len(self) <= i < len(self):
            raise IndexError(f"image {i} is out of range for {len(self)} images")
        return i % len(self)

    def _rows(self, ids: list[int]) -> Tensor:
        """Images ``ids`` as one float tensor: the cached ones copied, the others decoded (in threads) and cached."""
        with self._lock:
            have = {i: self._cache[i] for i in dict.fromkeys(ids) if i in self._cache}
            for i in have:
                self._cache.move_to_end(i)
        missing = [i for i in dict.fromkeys(ids) if i not in have]
        if missing:
            threads = min(DECODE_THREADS, os.cpu_count() or 1, len(missing))
            with ThreadPoolExecutor(threads) as pool:
                decoded = dict(zip(missing, pool.map(self._decode, missing), strict=True))
            have |= decoded
            with self._lock:
                for i, image in decoded.items():
                    self._cache[i] = image
                while len(self._cache) > self.cached_images:
                    self._cache.popitem(last=False)
        if not ids:
            return torch.empty((0, *self.shape[1:]), dtype=self.dtype)
        return torch.stack([have[i] for i in ids]).float().div_(255)

    def _decode(self, i: int) -> Tensor:
        image = self.decode(self.files[i])
        if tuple(image.shape) != tuple(self.shape[1:]) or image.dtype != torch.uint8:
            raise ValueError(
                f"{self.files[i]} decoded to {image.dtype} {tuple(image.shape)}, not uint8 {tuple(self.shape[1:])}"
            )
        return image
