"""Fine-tuning loops of the text zoo: length-pooled seeded batches, AdamW with linear decay (after an optional linear
warm-up), and validation checks during training: a stop when held-out accuracy plateaus (:class:`Plateau`), or the
best validation checkpoint of a fixed budget (:class:`BestCheckpoint`, B-cos LM App. E)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor, nn

from faithbench.io import atomic_torch_save
from faithbench.models.zoo.training import progress_bar, say, training_step

SNAPSHOT_FORMAT = 1


def text_logits(model: nn.Module, ids: Tensor, pad: int) -> Tensor:
    """Logits of padded token ids, cut to the batch's longest sequence."""
    length = int((ids != pad).sum(dim=1).max())
    ids = ids[:, :length]
    return model(ids, (ids != pad).long())


def length_batches(lengths: Tensor, batch_size: int, gen: torch.Generator, pool: int = 32) -> list[Tensor]:
    """One epoch's batches: a seeded shuffle, cut into pools of ``pool`` batches, each pool sorted by length and cut
    into batches, the batches shuffled again. Padding to the batch's longest costs little (2x faster than random
    batches of Rotten Tomatoes sentences)."""
    order = torch.randperm(len(lengths), generator=gen)
    batches = []
    for start in range(0, len(order), batch_size * pool):
        chunk = order[start : start + batch_size * pool]
        chunk = chunk[lengths[chunk].argsort(stable=True)]
        batches += list(chunk.split(batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def train_text_classifier(
    model: nn.Module,
    ids: Tensor,
    labels: Tensor,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    loss: str,
    pad: int = 0,
    after_epoch: Callable[[nn.Module, int], bool] | None = None,
    frozen: Iterable[str] = (),
    warmup: float = 0.0,
    checks_per_epoch: int = 1,
    snapshot: Path | None = None,
) -> int:
    """AdamW (weight decay 0.01), linear decay to 0 (after a linear warm-up over the first ``warmup`` share of the
    steps, as Hugging Face's linear schedule), length-pooled seeded batches (:func:`length_batches`), on the device of
    ``model``; ``loss``: ``ce`` or ``bce`` (one-hot); ``pad``: the [PAD] id. ``after_epoch(model, steps)`` runs
    ``checks_per_epoch`` times an epoch, the last after its final batch (model in eval mode; ``steps``: optimiser
    steps so far) and stops training by returning True. ``frozen``: names of parameters left as they are (no
    gradient, no weight decay). ``snapshot``: a file that keeps, at each epoch's end, all the state the rest of the
    training reads (weights, optimiser, schedule, both random generators, the checker's record), so a training cut
    short on the same machine resumes from its last finished epoch and ends with the bits of one run through (the
    caller removes it once the trained weights are kept: the zoo after saving the checkpoint). Returns the epochs
    run."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    lengths = (ids != pad).sum(dim=1)
    named = dict(model.named_parameters())
    if unknown := set(frozen) - set(named):
        raise ValueError(f"frozen names no parameter of the model: {sorted(unknown)}")
    kept = {name: named[name].requires_grad for name in frozen}
    for name in kept:
        named[name].requires_grad_(False)
    opt = torch.optim.AdamW([p for name, p in named.items() if name not in kept], lr=lr, weight_decay=0.01)
    per_epoch = (len(labels) + batch_size - 1) // batch_size
    steps = epochs * per_epoch
    warm = round(warmup * steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _linear(steps, warm))
    checks = {max(1, round(per_epoch * (k + 1) / checks_per_epoch)) for k in range(checks_per_epoch)}  # batch counts
    checker = after_epoch if hasattr(after_epoch, "state_dict") else None  # (a plain function keeps no state)
    parts = {"model": model, "opt": opt, "sched": sched, "checker": checker}
    # what makes a snapshot this training's: the same loop, on the same kind of device with the same kernels and
    # threads (another machine's numerics would mix two builds in one)
    shape = {"format": SNAPSHOT_FORMAT, "epochs": epochs, "per_epoch": per_epoch, "seed": seed} | {
        "device": device.type,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    run, stop = _resume(snapshot, shape, parts, gen, device) if snapshot is not None else (0, False)
    model.train()
    with progress_bar(total=steps - run * per_epoch, desc="text model", leave=False, unit="step") as bar:
        while run < epochs and not stop:
            for i, idx in enumerate(length_batches(lengths, batch_size, gen)):
                logits = text_logits(model, ids[idx].to(device), pad)
                training_step(logits, labels[idx].to(device), loss, opt, sched, bar)
                if after_epoch is not None and i + 1 in checks:
                    stop = after_epoch(model.eval(), run * per_epoch + i + 1)
                    model.train()
                    if stop:
                        break
            run += 1
            if snapshot is not None:
                _keep(snapshot, shape | {"epochs_done": run, "stopped": stop}, parts, gen, device)
    for name, flag in kept.items():
        named[name].requires_grad_(flag)
    model.eval()
    return run


def _keep(path: Path, head: dict, parts: dict, gen: torch.Generator, device: torch.device) -> None:
    state = {k: v.state_dict() for k, v in parts.items() if v is not None}
    rng = {"cpu": torch.get_rng_state(), "data": gen.get_state()}
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state(device)
    try:
        atomic_torch_save(path, head | {"state": state, "rng": rng})
    except OSError as exc:  # a snapshot only saves time on a resume: training goes on without it
        say(f"could not keep the snapshot {path} ({exc.strerror or exc}); training goes on without it")


def _resume(path: Path, shape: dict, parts: dict, gen: torch.Generator, device: torch.device) -> tuple[int, bool]:
    """Restore the training state a snapshot at ``path`` keeps; returns its finished epochs and whether training had
    stopped ((0, False): there is none, or it is unreadable or of another training, said and left to be
    overwritten)."""
    if not path.exists():
        return 0, False
    try:
        snap = torch.load(path, map_location="cpu", weights_only=True)
        if {k: snap.get(k) for k in shape} != shape:
            raise ValueError(f"it is of another training ({ {k: snap.get(k) for k in shape} }, this one {shape})")
    except Exception as exc:  # noqa: BLE001 - any unreadable snapshot: train from the start
        say(f"snapshot {path} not used ({exc}): training from the start")
        return 0, False
    try:
        for k, v in parts.items():
            if v is not None:
                v.load_state_dict(snap["state"][k])
        torch.set_rng_state(snap["rng"]["cpu"])
        gen.set_state(snap["rng"]["data"])
        if device.type == "cuda":
            torch.cuda.set_rng_state(snap["rng"]["cuda"], device)
    except Exception as exc:  # half restored: no training can go on from here
        raise RuntimeError(f"snapshot {path} does not fit this training ({exc}); delete it to build afresh") from exc
    say(f"resuming from {path}: epoch {snap['epochs_done']} of {shape['epochs']} done")
    return int(snap["epochs_done"]), bool(snap["stopped"])


def _linear(steps: int, warm: int) -> Callable[[int], float]:
    if warm == 0:
        return lambda step: 1 - step / steps  # (the recipes built before warm-up existed keep their bits)
    return lambda step: step / warm if step < warm else (steps - step) / (steps - warm)


class _Checker:
    """A training check whose record so far (the attributes named in ``STATE``) a snapshot keeps."""

    STATE: tuple[str, ...] = ()

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.STATE}

    def load_state_dict(self, state: dict) -> None:
        for k in self.STATE:
            setattr(self, k, state[k])


class Plateau(_Checker):
    """Stops fine-tuning (as ``after_epoch`` of :func:`train_text_classifier`) when held-out accuracy plateaus:
    after an epoch whose validation accuracy is not ``min_delta`` above the best so far, ``patience`` times in a
    row; the best epoch's weights are kept. Until the best is ``min_delta`` above ``floor`` (the majority-class rate:
    a model that still predicts one class has not begun to learn, it has not plateaued) no epoch counts.
    ``accuracy(model, split)`` reads the ``validation`` and ``test`` splits; the test split is logged per epoch for
    the report, never consulted for the decision."""

    STATE = ("validation", "test", "best_state", "kept_epoch", "stale")

    def __init__(
        self,
        *,
        min_delta: float,
        patience: int,
        accuracy: Callable[[nn.Module, str], float],
        floor: float | None = None,
    ) -> None:
        self.min_delta, self.patience, self.accuracy, self.floor = min_delta, patience, accuracy, floor
        self.validation: list[float] = []
        self.test: list[float] = []
        self.best_state: dict = {}
        self.kept_epoch = 0  # 1-based epoch whose weights ``best_state`` holds
        self.stale = 0

    def __call__(self, model: nn.Module, steps: int = 0) -> bool:
        accuracy = self.accuracy(model, "validation")
        self.test.append(self.accuracy(model, "test"))
        self.validation.append(accuracy)
        if self.kept_epoch == 0 or accuracy >= self.validation[self.kept_epoch - 1] + self.min_delta:
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.kept_epoch, self.stale = len(self.validation), 0
        elif self.floor is None or self.validation[self.kept_epoch - 1] >= self.floor + self.min_delta:
            self.stale += 1
        return self.stale >= self.patience

    def record(self) -> dict:
        """What the build info keeps: the per-epoch accuracies and the epoch whose weights were kept."""
        return {
            "validation_accuracy_by_epoch": self.validation,
            "test_accuracy_by_epoch": self.test,
            "kept_epoch": self.kept_epoch,
            "plateau": {"min_delta": self.min_delta, "patience": self.patience}
            | ({"floor": self.floor} if self.floor is not None else {}),
        }


class BestCheckpoint(_Checker):
    """A fixed budget's best validation checkpoint (B-cos LM App. E: "we use the checkpoint with the best validation
    performance"), as ``after_epoch`` of :func:`train_text_classifier`: at every check the validation accuracy (which
    decides) and the test accuracy (logged, never consulted) with the optimiser steps so far; the weights of the
    first check with the highest validation accuracy are kept. Never stops training."""

    STATE = ("validation", "test", "steps", "best_state")

    def __init__(self, *, accuracy: Callable[[nn.Module, str], float]) -> None:
        self.accuracy = accuracy
        self.validation: list[float] = []
        self.test: list[float] = []
        self.steps: list[int] = []
        self.best_state: dict = {}

    def __call__(self, model: nn.Module, steps: int) -> bool:
        accuracy = self.accuracy(model, "validation")
        if not self.validation or accuracy > max(self.validation):
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.validation.append(accuracy)
        self.test.append(self.accuracy(model, "test"))
        self.steps.append(steps)
        return False

    def record(self) -> dict:
        """What the build info keeps: every check's steps and accuracies, and the steps to the kept checkpoint (B-cos
        LM Tab. 3: steps to the best validation score)."""
        best = self.validation.index(max(self.validation))
        return {
            "validation_accuracy_by_check": self.validation,
            "test_accuracy_by_check": self.test,
            "steps_by_check": self.steps,
            "steps_to_best_validation": self.steps[best],
            "kept_check": best + 1,
        }
