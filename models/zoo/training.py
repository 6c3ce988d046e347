"""Seeded CPU-friendly training and evaluation loops for the zoo."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch
import torch.nn.functional as F
from bcos.modules.losses import UniformOffLabelsBCEWithLogitsLoss
from torch import Tensor, nn

from faithbench.models.adapter import predict_logits
from faithbench.models.data.mnist import Split
from faithbench.progress import Bar, Lines
from faithbench.progress import progress_bar as _progress_bar

Encode = Callable[[Tensor], Tensor]

# Zoo builds run with this many intra-op threads on every machine: CPU kernels split reductions by
# thread count, so a free count would give other bits on a machine with more cores.
# FAITHBENCH_BUILD_THREADS overrides it (e.g. 1, to build a zoo under other numerics on purpose).
BUILD_THREADS = 2
# Losses: cross-entropy; BCE on one-hot targets; BCE with the non-target classes' targets at 1/C (TPAMI Sec. 3.2.2,
# the bcos package's UniformOffLabelsBCEWithLogitsLoss: positive evidence for the class, not against the others).
LOSSES = ("ce", "bce", "bce_uniform")


# The name of the zoo build in progress ("zoo build 2/5 cnn_mnist"): its training bars say which build they are.
_BUILD_LABEL: ContextVar[str | None] = ContextVar("build_label", default=None)


@contextmanager
def build_label(label: str) -> Iterator[None]:
    """Name the training bars started inside ``label`` (instead of the recipe's own description)."""
    token = _BUILD_LABEL.set(label)
    try:
        yield
    finally:
        _BUILD_LABEL.reset(token)


def say(msg: str) -> None:
    """A zoo message on stderr (``[faithbench zoo] ...``)."""
    print(f"[faithbench zoo] {msg}", file=sys.stderr)


# Where the build in progress keeps its snapshot at each epoch's end (the zoo sets it: NAME-HASH.partial beside the
# checkpoint), so that a build cut short (Ctrl-C, a session's end) resumes from its last epoch with the same bits.
_SNAPSHOT: ContextVar[Path | None] = ContextVar("training_snapshot", default=None)


@contextmanager
def training_snapshot(path: Path) -> Iterator[None]:
    """Builds inside keep their per-epoch snapshot at ``path`` (:func:`snapshot_path`); it is removed when the block
    ends without an error (the build's checkpoint saved), kept when it is cut short."""
    token = _SNAPSHOT.set(path)
    try:
        yield
    finally:
        _SNAPSHOT.reset(token)
    path.unlink(missing_ok=True)


def snapshot_path() -> Path | None:
    """The snapshot path of the build in progress (:func:`training_snapshot`), or None."""
    return _SNAPSHOT.get()


def progress_bar(iterable: object = None, **kwargs: object) -> Bar | Lines:
    """A zoo training bar (:func:`faithbench.progress.progress_bar`: a bar in a terminal, plain lines in a log;
    silent under ``--no-progress``), named by the build in progress."""
    label = _BUILD_LABEL.get()
    if label is not None:
        kwargs["desc"] = label
    return _progress_bar(iterable, **kwargs)


def build_threads() -> int:
    """Intra-op threads of a zoo build: ``$FAITHBENCH_BUILD_THREADS`` or :data:`BUILD_THREADS`."""
    value = os.environ.get("FAITHBENCH_BUILD_THREADS", "")
    if not value:
        return BUILD_THREADS
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"FAITHBENCH_BUILD_THREADS={value!r}: expected a positive whole number of threads")
    return int(value)


@contextmanager
def build_numerics() -> Iterator[dict]:
    """Fixed thread count for a build; yields what else decides its bits (see README, the zoo)."""
    before, threads = torch.get_num_threads(), build_threads()
    torch.set_num_threads(threads)
    try:
        yield {
            "threads": threads,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": str(torch.__version__),  # a str subclass that weights_only loading refuses
        }
    finally:
        torch.set_num_threads(before)


def train_classifier(
    module: nn.Module,
    encode: Encode,
    data: Split,
    *,
    epochs: int,
    lr: float,
    seed: int,
    loss: str = "ce",
    batch_size: int = 64,
    params: list[nn.Parameter] | None = None,
    shift: int = 0,
    canvas: int = 0,
    delete_grid: int = 0,
    delete_share: float = 0.5,
    desc: str = "train",
    after_epoch: Callable[[nn.Module], object] | None = None,
) -> list:
    """Adam, cosine schedule, shuffled mini-batches drawn from a seeded generator; returns what ``after_epoch``
    (called with the module in eval mode after every epoch; it draws no training randomness, so the weights are
    the same with or without it) returned, epoch by epoch.

    ``loss``: one of :data:`LOSSES` (``bce``: one-hot binary cross-entropy on every logit; ``bce_uniform``:
    the non-target classes' targets at 1/C, the B-cos papers' target encoding); ``params``
    restricts training to a subset (linear probes); ``shift`` > 0 augments with random
    translations of up to that many pixels (zero fill); ``canvas`` > 0 places every image at a
    random position (the whole image visible) on a black ``canvas`` x ``canvas`` image first; ``delete_grid`` > 0
    deletes, in a ``delete_share`` of the images, one random cell of a ``delete_grid`` x ``delete_grid`` grid before
    either (:func:`random_cell_deletion`: the in-domain fine-tune of the single-deletion score).
    """
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    params = list(module.parameters()) if params is None else params
    opt = torch.optim.Adam(params, lr=lr)
    steps = epochs * ((len(data.labels) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    fill = data.images.mean(dim=(0, 2, 3)) if delete_grid else None  # the training images' mean colour
    module.train()
    log = []
    with progress_bar(total=steps, desc=desc, leave=False, unit="step") as bar:
        for _ in range(epochs):
            order = torch.randperm(len(data.labels), generator=gen)
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                images = data.images[idx]
                if delete_grid:
                    images = random_cell_deletion(images, delete_grid, delete_share, fill, gen)
                if canvas:
                    images = random_placement(images, canvas, gen)
                if shift:
                    images = random_shift(images, shift, gen)
                training_step(module(encode(images)), data.labels[idx], loss, opt, sched, bar)
            if after_epoch is not None:
                log.append(after_epoch(module.eval()))
                module.train()
    module.eval()
    return log


def training_step(
    logits: Tensor,
    labels: Tensor,
    loss: str,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler,
    bar: Bar | Lines,
) -> None:
    """One optimiser step on ``loss`` (one of :data:`LOSSES`)."""
    value = classification_loss(logits, labels, loss)
    opt.zero_grad(set_to_none=True)
    value.backward()
    opt.step()
    sched.step()
    bar.update()
    bar.set_postfix(loss=f"{value.item():.3f}")


def classification_loss(logits: Tensor, labels: Tensor, loss: str) -> Tensor:
    """Mean ``ce`` (cross-entropy), ``bce`` (BCE, one-hot targets) or ``bce_uniform`` (BCE, targets 1 for the
    label and 1/C for every other class) of (N, C) ``logits`` and (N,) class ``labels``."""
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(logits, F.one_hot(labels, logits.shape[1]).to(logits.dtype))
    if loss == "bce_uniform":
        return UniformOffLabelsBCEWithLogitsLoss()(logits, labels)
    if loss == "ce":
        return F.cross_entropy(logits, labels)
    raise ValueError(f"unknown loss {loss!r}; valid: {', '.join(LOSSES)}")


def random_shift(images: Tensor, max_shift: int, gen: torch.Generator) -> Tensor:
    """Translate each image by a random (dy, dx) in [-max_shift, max_shift], filling with zeros."""
    n, _, h, w = images.shape
    padded = F.pad(images, (max_shift,) * 4)
    dy, dx = torch.randint(0, 2 * max_shift + 1, (2, n), generator=gen)
    rows = (dy.view(n, 1) + torch.arange(h)).view(n, 1, h, 1).expand(n, images.shape[1], h, w + 2 * max_shift)
    out = padded.gather(2, rows)
    cols = (dx.view(n, 1) + torch.arange(w)).view(n, 1, 1, w).expand(n, images.shape[1], h, w)
    return out.gather(3, cols)


def random_cell_deletion(images: Tensor, grid: int, share: float, fill: Tensor, gen: torch.Generator) -> Tensor:
    """In a random ``share`` of the images (N, C, H, W), the pixels of one random cell of a ``grid`` x ``grid`` grid set
    to the (C,) colour ``fill``: IDSDS's training-time deletions (Hesse et al. 2024: one cell in half the images), whose
    cells are the single-deletion score's (pixel (i, j) in cell (floor(i grid / H), floor(j grid / W)))."""
    n, _, h, w = images.shape
    cells = (torch.arange(h) * grid // h).view(-1, 1) * grid + (torch.arange(w) * grid // w).view(1, -1)
    chosen = torch.randint(0, grid * grid, (n,), generator=gen)
    deleted = torch.rand(n, generator=gen) < share
    mask = (cells == chosen.view(n, 1, 1)) & deleted.view(n, 1, 1)
    return torch.where(mask.unsqueeze(1), fill.to(images.dtype).view(1, -1, 1, 1), images)


def random_placement(images: Tensor, canvas: int, gen: torch.Generator) -> Tensor:
    """Each image (N, C, h, w) pasted at a random position of a black ``canvas`` x ``canvas`` image."""
    n, c, h, w = images.shape
    if canvas < max(h, w):
        raise ValueError(f"a {canvas} px canvas cannot hold {h} x {w} images")
    pad_h, pad_w = canvas - h, canvas - w
    padded = F.pad(images, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
    return random_shift(padded, max(pad_h, pad_w) // 2, gen) if max(pad_h, pad_w) > 1 else padded


def accuracy(module: nn.Module, encode: Encode, data: Split) -> float:
    return (predict_logits(module, encode, data.images).argmax(1) == data.labels).float().mean().item()


def held_out_record(correct: Tensor, predicted: Tensor | None = None) -> dict:
    """A model's held-out accuracy from its per-item results (bool, the split's order), with the items themselves as
    one 0/1 character each (``test_correct``): two models' accuracies on the same items are then compared paired.
    With its ``predicted`` classes, also how many distinct classes it predicts (``test_predicted_classes``: 1 is a
    model that never learned to tell the classes apart, whose explanations the claims do not read)."""
    correct = correct.bool().cpu()
    record = {
        "test_accuracy": correct.float().mean().item(),
        "n_test": len(correct),
        "test_correct": "".join("1" if c else "0" for c in correct.tolist()),
    }
    if predicted is not None:
        record["test_predicted_classes"] = int(predicted.unique().numel())
    return record
