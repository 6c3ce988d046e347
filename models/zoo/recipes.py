"""How zoo models are built: the ``Recipe`` record, the training code, and recipe factories.

The zoo's entries themselves are data in :mod:`faithbench.models.zoo.entries`. A recipe's ``params`` are hashed
into its checkpoint name (see :mod:`faithbench.models.zoo`), so they hold every setting its training reads.
Families of recipes share code through factories:
:func:`from_scratch` (train a fresh architecture), :func:`bcosified` (B-cosify a trained zoo model and
fine-tune it with BCE; params record every deviation from the B-cosification recipe's B = 2 and
removed biases), :func:`bcos_cnn` (from-scratch B-cos CNNs of any B, with or without MaxOut) and :func:`in_domain`
(a zoo image model fine-tuned on cell-deleted images: the single-deletion score's in-domain variant).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from torch import nn

from faithbench.models.bcosify import bcosify
from faithbench.models.data.mnist import MNIST_MEAN, MNIST_STD
from faithbench.models.data.splits import image_splits
from faithbench.models.encoding import InputEncoding, bcos_inverse, normalized
from faithbench.models.nets.aloe import AlignmentConfig, align
from faithbench.models.nets.architectures import (
    bcos_digit_cnn,
    bcos_gap_cnn,
)
from faithbench.models.zoo.training import accuracy, train_classifier

STANDARD = normalized(MNIST_MEAN, MNIST_STD)
BCOS = bcos_inverse(1)
BCE_LOGIT_BIAS = -math.log(9)  # -log(C - 1): the B-cos logit bias for 10 classes
# B-cos training targets (TPAMI Sec. 3.2.2 / App. C; B-cosification's and ALOE's code): the non-target classes at
# 1/C ("uniform", the default) or 0 ("one_hot"). Recorded in every B-cos recipe's params.
TARGET_ENCODINGS = {"uniform": "bce_uniform", "one_hot": "bce"}


def bce_loss(p: dict) -> str:
    """The training loss of a B-cos recipe's ``target_encoding``."""
    encoding = p["target_encoding"]
    if encoding not in TARGET_ENCODINGS:
        raise ValueError(f"unknown target_encoding {encoding!r}; valid: {', '.join(TARGET_ENCODINGS)}")
    return TARGET_ENCODINGS[encoding]


VIT_PATCHES = "to_patch_embedding.linear"  # the layer of a digit ViT that sees the image


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """How to build one zoo model: an architecture, a way to train it, and its metadata."""

    name: str
    family: str
    description: str
    encoding: InputEncoding
    architecture: Callable[[], nn.Module]
    train: Callable[[nn.Module, dict[str, nn.Module], dict], dict]
    params: dict = field(default_factory=dict)
    depends: tuple[str, ...] = ()
    is_vit: bool = False
    activation: str = "softmax"
    logit_bias: float = 0.0
    conv_layer: str | None = None
    modality: str = "image"
    dataset: str = "mnist"  # the data set whose classes the model predicts (suites must use it)
    num_classes: int = 10
    held_out: Callable[[nn.Module], dict] | None = None  # held-out accuracy; None: the MNIST test split
    tokenizer: str | None = None  # text models: the vocabulary of their token ids (models.text_models.WORDPIECE...)
    downloads: tuple[str, ...] = ()  # what the build reads from the Hugging Face cache
    on_request: bool = False  # built only when named (GPU presets, Hugging Face checkpoints), not by `bench zoo`
    # parameters that training leaves as ``architecture()`` sets them (a pretrained starting point's): not stored in
    # the checkpoint, which then holds only what training changed
    frozen: tuple[str, ...] = ()


# --------------------------------------------------------------------------- training


def no_training(model: nn.Module, deps: dict, p: dict) -> dict:
    return {}


def _fit(model: nn.Module, encoding: InputEncoding, p: dict, *, loss: str, desc: str) -> list:
    """Train on the recipe's image set by its schedule (epochs, lr, seed, augmentation); the test accuracy after
    each epoch."""
    train, test = image_splits(p.get("dataset", "mnist"))
    schedule = {"epochs": p["epochs"], "lr": p["lr"], "seed": p["seed"]}
    augmentation = {"shift": p.get("shift", 0), "canvas": p.get("canvas", 0)}
    augmentation |= {"delete_grid": p.get("delete_grid", 0), "delete_share": p.get("delete_share", 0.5)}
    after_epoch = partial(accuracy, encode=encoding, data=test)
    return train_classifier(
        model, encoding, train, **schedule, **augmentation, loss=loss, desc=desc, after_epoch=after_epoch
    )


def _train_from_scratch(
    model: nn.Module, deps: dict, p: dict, *, encoding: InputEncoding, bcos: bool, desc: str
) -> dict:
    return {"test_accuracy_by_epoch": _fit(model, encoding, p, loss=bce_loss(p) if bcos else "ce", desc=desc)}


def bcosify_digits(
    source: nn.Module, *, b: float, keep_bias: bool, first_layer: str | None, classifier_before_pooling: bool = True
) -> nn.Sequential:
    return bcosify(
        source,
        image_channels=1,
        mean=MNIST_MEAN,
        std=MNIST_STD,
        num_classes=10,
        b=b,
        keep_bias=keep_bias,
        first_layer=first_layer,
        classifier_before_pooling=classifier_before_pooling,
    )


def _bcosified_train(model: nn.Module, deps: dict, p: dict, *, desc: str, **conversion) -> dict:
    """Convert the (single) dependency with the recipe's conversion settings, then fine-tune with BCE."""
    (source,) = deps.values()
    model.load_state_dict(bcosify_digits(source, **conversion).state_dict())
    before = accuracy(model, BCOS, image_splits(p.get("dataset", "mnist"))[1])
    return {
        "accuracy_before_finetuning": before,
        "test_accuracy_by_epoch": _fit(model, BCOS, p, loss=bce_loss(p), desc=desc),
    }


def aloe_train(model: nn.Module, deps: dict, p: dict) -> dict:
    train, _ = image_splits(p.get("dataset", "mnist"))
    (teacher,) = deps.values()
    student = bcosify_digits(teacher, b=2.0, keep_bias=False, first_layer=VIT_PATCHES, classifier_before_pooling=False)
    log = align(
        student,
        teacher,
        train.images,
        teacher_encode=STANDARD,
        student_encode=BCOS,
        cfg=AlignmentConfig(**p["alignment"]),
    )
    model[0].load_state_dict(student[0].state_dict())
    model[1].load_state_dict(student[1].state_dict())
    # Linear probe: only the (B-cos) head learns, from labels, with BCE.
    model.requires_grad_(False)
    head = list(model[1].linear_head.parameters())
    for q in head:
        q.requires_grad_(True)
    train_classifier(
        model,
        BCOS,
        train,
        epochs=p["probe_epochs"],
        lr=p["probe_lr"],
        seed=p["seed"],
        loss=bce_loss(p),
        params=head,
        desc="aloe probe",
    )
    model.requires_grad_(True)
    return {"alignment": {k: v for k, v in log.items() if k != "log"}}


# --------------------------------------------------------------------------- recipe factories


def from_scratch(name: str, family: str, description: str, architecture: Callable[[], nn.Module], **kw) -> Recipe:
    """A fresh ``architecture`` trained on the digits: CE for standard models, BCE (with the B-cos
    encoding, activation and logit bias) for B-cos ones; ``kw``: ``params`` and Recipe fields."""
    bcos = family == "bcos"
    encoding = BCOS if bcos else STANDARD
    train = partial(_train_from_scratch, encoding=encoding, bcos=bcos, desc=name)
    extra = {"activation": "sigmoid", "logit_bias": BCE_LOGIT_BIAS} if bcos else {}
    if kw.get("dataset", "mnist") != "mnist":  # in the params, so in the checkpoint's hash
        kw["params"] = {**kw.get("params", {}), "dataset": kw["dataset"]}
    return Recipe(
        name=name, family=family, description=description, encoding=encoding, architecture=architecture, train=train,
        **extra, **kw,
    )  # fmt: skip


def bcosified(
    name: str,
    source: str,
    source_architecture: Callable[[], nn.Module],
    description: str,
    *,
    epochs: int,
    lr: float,
    seed: int = 0,
    shift: int = 0,
    canvas: int = 0,
    b: float = 2.0,
    keep_bias: bool = False,
    is_vit: bool = False,
    conv_layer: str | None = None,
    target_encoding: str = "uniform",
    classifier_before_pooling: bool = True,
    dataset: str = "mnist",
) -> Recipe:
    """``bcosify(source)`` with B = ``b`` (biases removed unless ``keep_bias``, the classifier moved before the
    global pooling unless not ``classifier_before_pooling``), fine-tuned with BCE on ``target_encoding``."""
    conversion = {
        "b": b,
        "keep_bias": keep_bias,
        "first_layer": VIT_PATCHES if is_vit else None,
        "classifier_before_pooling": classifier_before_pooling,
    }
    params: dict = {"epochs": epochs, "lr": lr, "seed": seed}
    params |= {"target_encoding": target_encoding, "classifier_before_pooling": classifier_before_pooling}
    # Only deviations from the B-cosification recipe are recorded, so the main recipes keep their hashes.
    params |= {"shift": shift} if shift else {}
    params |= {"canvas": canvas} if canvas else {}
    params |= {"b": b} if b != 2.0 else {}
    params |= {"keep_bias": True} if keep_bias else {}
    params |= {"dataset": dataset} if dataset != "mnist" else {}
    return Recipe(
        name=name,
        family="bcosified",
        description=description,
        encoding=BCOS,
        architecture=lambda: bcosify_digits(source_architecture(), **conversion),
        train=partial(_bcosified_train, desc=name, **conversion),
        params=params,
        depends=(source,),
        is_vit=is_vit,
        activation="sigmoid",
        logit_bias=BCE_LOGIT_BIAS,
        conv_layer=conv_layer,
        dataset=dataset,
    )


def bcos_cnn(
    name: str,
    *,
    b: float,
    max_out: int = 1,
    epochs: int = 4,
    lr: float = 1e-3,
    seed: int = 0,
    shift: int = 0,
    canvas: int = 0,
    gap: bool = False,
    target_encoding: str = "uniform",
    dataset: str = "mnist",
) -> Recipe:
    """A from-scratch B-cos CNN with every layer's B = ``b``: :func:`bcos_digit_cnn` (dense head slid as
    a 7x7 convolution), or with ``gap`` :func:`bcos_gap_cnn` (:class:`GapDigitNet`'s geometry)."""
    params: dict = {"epochs": epochs, "lr": lr, "seed": seed}
    params |= {"b": b} if b != 2 else {}
    params |= {"max_out": max_out} if max_out != 1 else {}
    params |= {"shift": shift} if shift else {}
    params |= {"canvas": canvas} if canvas else {}
    params |= {"target_encoding": target_encoding}
    params |= {"classifier_before_pooling": True} if gap else {}  # the dense head is a convolution already
    unit = f", MaxOut {max_out}" if max_out > 1 else ""
    head = ", 1x1 classifier then GAP" if gap else ""
    seen = f" on a {canvas} px canvas" if canvas else f" with ±{shift} px shifts" if shift else ""
    return from_scratch(
        name,
        "bcos",
        f"B-cos CNN (B = {b:g}{unit}{head}, official bcos layers) trained from scratch {epochs} epochs{seen}, BCE "
        f"({'non-target classes at 1/C' if target_encoding == 'uniform' else 'one-hot targets'})",
        partial(bcos_gap_cnn if gap else bcos_digit_cnn, b=b, max_out=max_out),
        params=params,
        conv_layer="9",
        dataset=dataset,
    )


def _in_domain_train(model: nn.Module, deps: dict, p: dict, *, encoding: InputEncoding, loss: str, desc: str) -> dict:
    """The parent's weights, then fine-tuned on its data with one cell deleted in a share of the images."""
    (parent,) = deps.values()
    model.load_state_dict(parent.state_dict())
    before = accuracy(model, encoding, image_splits(p.get("dataset", "mnist"))[1])
    after = _fit(model, encoding, p, loss=loss, desc=desc)
    return {"accuracy_before_finetuning": before, "test_accuracy_by_epoch": after}


def in_domain(parent: Recipe, *, grid: int = 4, share: float = 0.5, epochs: int = 2, lr: float = 3e-4) -> Recipe:
    """IDSDS's in-domain variant of the image model ``parent`` (Hesse et al. 2024), named ``{parent}_idsds``: its
    weights fine-tuned ``epochs`` (Adam at ``lr``, cosine) on its data set, where a ``share`` of the training images
    have one random cell of a ``grid`` x ``grid`` grid set to the images' mean colour, so that the single-deletion
    score's deletions (``[single_deletion] grid``, ``baseline = "mean"``) are in the model's domain. The authors
    fine-tune 30 epochs with SGD on ImageNet; the zoo's models converge in far fewer. Everything else (family,
    encoding, loss, the parent's own augmentation) is the parent's."""
    kept = ("seed", "shift", "canvas", "dataset", "target_encoding")
    params = {k: parent.params[k] for k in kept if k in parent.params} | {"seed": parent.params.get("seed", 0)}
    params |= {"epochs": epochs, "lr": lr, "delete_grid": grid, "delete_share": share}
    loss = "ce" if parent.family == "standard" else bce_loss(params)
    return replace(
        parent,
        name=f"{parent.name}_idsds",
        description=f"{parent.name} fine-tuned {epochs} epochs with one of its {grid} x {grid} cells deleted (mean "
        f"colour) in {share:.0%} of the images: in-domain for the single-deletion score (IDSDS)",
        train=partial(_in_domain_train, encoding=parent.encoding, loss=loss, desc=f"{parent.name}_idsds"),
        params=params,
        depends=(parent.name,),
        frozen=(),
    )
