"""An image folder is read lazily: listing it decodes nothing, indexing decodes only the images asked for (and keeps
the last ``cached_images``), and every value, the mean colour, the grids and a whole run equal the eager loader's
(torchvision's ImageFolder with Resize 256, CenterCrop 224, ToTensor, stacked)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from torch import nn
from torchvision import datasets, transforms

import faithbench
from faithbench.bench.run import data as run_data
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UserError
from faithbench.metrics.grids import make_grids
from faithbench.models import MODELS
from faithbench.models.data import datasets as data_sets
from faithbench.models.data.datasets import DATASETS, EvalData
from faithbench.models.data.lazy_images import LazyImages


def _folder(root, sizes=((300, 260), (240, 400), (256, 256), (500, 375), (231, 300), (320, 240))):
    rng = np.random.default_rng(0)
    for k, (w, h) in enumerate(sizes):
        folder = root / ("n01440764", "n01443537")[k % 2]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8")).save(folder / f"{k}.JPEG")
    return root


def _eager(root) -> torch.Tensor:
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor()])
    return torch.stack([image for image, _ in datasets.ImageFolder(str(root), transform=tf)])


def test_the_folder_reads_lazily_and_equals_the_eager_loader(tmp_path, monkeypatch):
    root = _folder(tmp_path / "images")
    decoded: list[str] = []
    decode = data_sets.decode_center_224
    monkeypatch.setattr(data_sets, "decode_center_224", lambda path: decoded.append(path) or decode(path))
    data = DATASETS.get("imagefolder").load(str(root), "auto", cached_images=2)
    assert isinstance(data.images, LazyImages) and data.images.shape == (6, 3, 224, 224) and not decoded
    assert data.labels.tolist() == [0, 0, 0, 1, 1, 1]  # synset folders: ImageNet indices 0 and 1
    eager = _eager(root)
    assert torch.equal(data.images[1:3], eager[1:3]) and len(decoded) == 2  # only the two asked for
    assert torch.equal(data.images[torch.tensor([2, 1])], eager[[2, 1]]) and len(decoded) == 2  # kept: not again
    assert torch.equal(data.images[4], eager[4]) and torch.equal(data.images[-1], eager[5])
    assert torch.equal(data.images[[0]], eager[[0]]) and len(decoded) == 5
    assert len(data.images._cache) == 2  # the last two decoded, no more
    assert torch.allclose(data.images.mean(dim=(0, 2, 3)), eager.mean(dim=(0, 2, 3)), atol=1e-6)
    assert data.images.mean(dim=(0, 2, 3), keepdim=True).shape == (1, 3, 1, 1)
    cells = torch.tensor([[0, 3, 4, 1], [5, 2, 1, 0]])  # 2 x 2 grids: cells indexed by a 2-D tensor
    for tiling in ("row-major", "column-major"):
        assert torch.equal(make_grids(data.images, cells, tiling=tiling), make_grids(eager, cells, tiling=tiling))
    with pytest.raises(IndexError, match="image 6 is out of range for 6 images"):
        data.images[6]
    with pytest.raises(TypeError, match="indexed by integers"):
        data.images[torch.ones(6, dtype=torch.bool)]
    with pytest.raises(ValueError, match="per-channel mean only"):
        data.images.mean(dim=(0,))


def test_an_unreadable_image_is_named_before_or_when_it_is_read(tmp_path):
    root = _folder(tmp_path / "images", sizes=((240, 240), (240, 240)))
    (root / "n01440764" / "9.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(UserError, match=r"1 of the 3 images drawn .* are not images \(e.g. .*9\.JPEG\): remove"):
        DATASETS.get("imagefolder").load(str(root), "sorted")  # headers are read when the folder is listed
    whole = (root / "n01443537" / "1.JPEG").read_bytes()
    (root / "n01440764" / "9.JPEG").write_bytes(whole[: len(whole) // 3])  # a header, then the file ends
    data = DATASETS.get("imagefolder").load(str(root), "sorted")
    assert data.images[[0, 2]].shape == (2, 3, 224, 224)  # the readable ones still read
    with pytest.raises(UserError, match=r"image .*9\.JPEG cannot be read .*remove it from the data root"):
        data.images[:]


def test_a_run_on_the_lazy_folder_scores_what_the_eager_one_does(tmp_path, monkeypatch):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 8, 8), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 2))
    faithbench.wrap_model(net, name="lazy_tiny", input_size=(224, 224))
    root = _folder(tmp_path / "images")
    keys = {"name": "lazy", "models": ["lazy_tiny"], "methods": ["gradient"], "dataset": "imagefolder"}
    suite = build_suite(
        {**keys, "metrics": ["pixel_deletion", "road"], "n_samples": 4, "data_root": str(root),
         "deletion": {"block_size": 56, "fractions": [0.0, 0.25, 0.5]}, "road": {"fractions": [0.25]}},
        "test",
    )  # fmt: skip
    cached = run_data._load
    try:
        cached.cache_clear()
        run(suite, tmp_path / "lazy", device="cpu", progress=False)
        lazy = DATASETS.get("imagefolder").load(str(root), "sorted")
        eager = EvalData(lazy.name, lazy.images[:], lazy.labels)  # what the loader returned before: one tensor
        monkeypatch.setattr(run_data, "_load", lambda *args, **kw: eager)
        run(suite, tmp_path / "eager", device="cpu", progress=False)
    finally:
        cached.cache_clear()
        MODELS.unregister("lazy_tiny")
    a, b = (pd.read_csv(tmp_path / side / "samples.csv") for side in ("lazy", "eager"))
    assert len(a) == len(b) > 0 and np.allclose(a["value"], b["value"], rtol=1e-5, atol=1e-7)
