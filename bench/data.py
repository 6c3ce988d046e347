"""Evaluation data: the offline MNIST test split, or an ImageNet-style folder given by ``--data-root``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from bench.suite import Suite
from faithbench.errors import UserError


@dataclass(frozen=True)
class EvalData:
    name: str
    images: Tensor  # (N, C, H, W) in [0, 1]
    labels: Tensor  # (N,)


def load_data(suite: Suite, max_images: int = 5000) -> EvalData:
    if suite.dataset == "mnist":
        from models.data import mnist_splits

        test = mnist_splits()[1]
        return EvalData("mnist-5k-test", test.images, test.labels)
    return _image_folder(suite.data_root, max_images)


def _image_folder(root: str | None, max_images: int) -> EvalData:
    """ImageNet-style folder (a sub-folder per class, sorted = class index); Resize 256, CenterCrop 224."""
    if not root:
        raise UserError("the imagefolder dataset needs --data-root DIR (one sub-folder of images per class)")
    path = Path(root)
    if not path.is_dir():
        raise UserError(f"--data-root {path} does not exist or is not a folder")
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor()])
    try:
        folder = datasets.ImageFolder(str(path), transform=tf)
    except (FileNotFoundError, RuntimeError) as exc:
        raise UserError(f"no images found under --data-root {path}: {exc}") from exc
    gen = torch.Generator().manual_seed(0)
    idx = torch.randperm(len(folder), generator=gen)[:max_images].sort().values
    images, labels = zip(*(folder[int(i)] for i in idx), strict=True)
    return EvalData(f"imagefolder:{path}", torch.stack(images), torch.tensor(labels))
