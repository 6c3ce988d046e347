"""The newer metrics with a peer in ``python -m bench perf``: continuity and RandomLogit against Quantus 0.6.0, Average
Drop / Increase in Confidence against torch-cam 0.5.0, on the same inputs, maps and classes, so that their values must
agree before a ratio counts (the conventions of ``tests/metrics/test_continuity.py``, ``test_sanity.py`` and
``test_cam_scores.py``).

* ``continuity`` (:func:`continuity_quantity`): the images and their ``n_steps`` translations along the width (the
  shift 0 left out, each input's own minimum filling) explained with the perf's method (``PerfSizes.robust_method``),
  faithbench in the method's batched calls (the images, then all ``B x steps`` translations), Quantus' ``Continuity``
  step by step on its ``n_quantus`` images (it explains the images itself too, and the shift 0; its ``a_batch`` is
  given so that its preprocessing does not explain them a third time), the maps divided by their own largest
  |entry| on both sides (Quantus' ``normalise_axes`` of one map) and made positive. Limit: the method's limit on the
  images, then on their translations (the explanations no implementation avoids);
* ``random_logit`` (:func:`random_logit_quantity`): the method's maps of the images (computed once, outside the
  time) against their maps for a random other class (explained in the timed call), ``quantus-ssim`` as Quantus'
  ``RandomLogit`` (maps divided by their own largest |entry|); the other classes of the first ``n_quantus`` images
  are the ones Quantus draws (recorded from one untimed run of it), the rest faithbench's keyed draw. Limit: the
  method's limit on the images for those classes;
* ``average_drop`` (:func:`average_drop_quantity`): Average Drop and Increase in Confidence of the perf's maps
  (their positive part over its max, multiplying the model input: torch-cam's convention), the class's probability
  (the model's activation) before and after the masking, against ``torchcam.metrics.ClassificationMetric`` on every
  image in one update, given faithbench's masks as its CAMs (precomputed, outside its time). torch-cam reports only
  the batch means, with ``Y + 1e-7`` as the drop's denominator: the agreement compares the means, faithbench's with
  that 1e-7. Limit: the two model calls of each chunk (image, masked image) replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from faithbench.activations import to_probabilities
from faithbench.bench.perf.perturbed import Peer
from faithbench.bench.perf.quantus import PER_MAP
from faithbench.metrics.cam_scores import drop_and_increase, positive_mask
from faithbench.metrics.continuity import continuity, fill_values, translate, translation_shifts
from faithbench.metrics.sanity import map_similarity, other_classes

TORCHCAM_EPS = 1e-7  # torch-cam's drop divides by Y + 1e-7


@dataclass(frozen=True)
class Explained:
    """A metric that explains again: faithbench's function over all images, the (inputs, targets) its method explains
    one after the other (its limit: the method's limit on each), its peers, a note."""

    what: str
    faithbench: Callable[[], Tensor]
    explains: tuple[tuple[Tensor, Tensor], ...]
    peers: tuple[Peer, ...]
    note: str


def quantus_explainer(explain: Callable[[Tensor, Tensor], Tensor], device: torch.device) -> Callable[..., np.ndarray]:
    """Quantus' ``explain_func`` of ``explain`` (its maps with a channel axis, in NumPy)."""

    def explain_func(model: Any, inputs: Any, targets: Any, **_: Any) -> np.ndarray:
        x = torch.as_tensor(inputs, device=device).float()
        return explain(x, torch.as_tensor(targets, device=device).long()).unsqueeze(1).cpu().numpy()

    return explain_func


def continuity_quantity(
    explain: Callable[[Tensor, Tensor], Tensor],
    module: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    n_steps: int,
    n_quantus: int,
    quantus: ModuleType | None,
) -> Explained:
    """Continuity of ``explain`` at ``inputs`` (B, C, H, W) for ``targets``; ``maps``: ``explain(inputs, targets)``
    (Quantus' ``a_batch``, which its continuity does not read)."""
    b, nq, width = inputs.shape[0], min(n_quantus, inputs.shape[0]), inputs.shape[3]
    n_steps = min(n_steps, 2 * width)  # a shift per pixel at most
    shifts = torch.tensor(translation_shifts(width, n_steps))
    m = len(shifts)
    beyond = int(shifts.abs().max()) > width  # Quantus cannot translate further than the side (n_steps divides 2W + 1)
    sample = torch.arange(b * m, device=inputs.device) // m
    moved = translate(inputs[sample], shifts.repeat(b), fill_values(inputs)[sample])

    def ours() -> Tensor:
        return continuity(explain, inputs, targets, n_steps=n_steps).values

    peers = []
    if quantus is not None and not beyond:
        x_q, y_q, a_q = (inputs[:nq].cpu().numpy(), targets[:nq].cpu().numpy(), maps[:nq, None].cpu().numpy())

        def theirs() -> object:
            metric = quantus.Continuity(nr_steps=n_steps, normalise_func_kwargs=PER_MAP, disable_warnings=True,
                                        display_progressbar=False)  # fmt: skip
            return metric(model=module, x_batch=x_q, y_batch=y_q, a_batch=a_q,
                          explain_func=quantus_explainer(explain, inputs.device), device=str(inputs.device),
                          batch_size=nq)  # fmt: skip

        peers.append(Peer("quantus", theirs, nq))
    note = f"{m} translations along the width (the shift 0 left out), each input's minimum filling, maps normalised"
    if beyond:
        note += f"; no Quantus row: {n_steps} steps divide 2 x {width} + 1, its last shift is beyond the side"
    return Explained("continuity", ours, ((inputs, targets), (moved, targets[sample])), tuple(peers), note)


def random_logit_quantity(
    explain: Callable[[Tensor, Tensor], Tensor],
    module: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    n_classes: int,
    n_quantus: int,
    quantus: ModuleType | None,
) -> Explained:
    """RandomLogit (``quantus-ssim``) of ``explain``'s ``maps`` of ``inputs`` for ``targets`` against its maps for
    other classes: Quantus' draw for the first ``n_quantus`` images, faithbench's keyed draw (seed 0) for the rest."""
    b, nq = inputs.shape[0], min(n_quantus, inputs.shape[0])
    other = other_classes(torch.arange(b), targets, n_classes, seed=0)
    peers = []
    if quantus is not None:
        x_q, y_q, a_q = (inputs[:nq].cpu().numpy(), targets[:nq].cpu().numpy(), maps[:nq, None].cpu().numpy())
        explain_func = quantus_explainer(explain, inputs.device)

        def theirs(func: Callable[..., np.ndarray] = explain_func) -> object:
            metric = quantus.RandomLogit(num_classes=n_classes, normalise_func_kwargs=PER_MAP, disable_warnings=True,
                                         display_progressbar=False)  # fmt: skip
            return metric(model=module, x_batch=x_q, y_batch=y_q, a_batch=a_q, explain_func=func,
                          device=str(inputs.device), batch_size=nq)  # fmt: skip

        drawn: list[np.ndarray] = []

        def recording(model: Any, inputs: Any, targets: Any, **kw: Any) -> np.ndarray:
            drawn.append(np.asarray(targets))
            return explain_func(model, inputs, targets, **kw)

        theirs(recording)  # untimed: the classes Quantus draws (a fixed seed: the same in every timed call)
        other[:nq] = torch.as_tensor(drawn[-1]).long()
        peers.append(Peer("quantus", theirs, nq))
    other = other.to(targets.device)

    def ours() -> Tensor:
        return map_similarity(maps, explain(inputs, other), "quantus-ssim")

    note = "a random other class per image (Quantus' draw on its images), quantus-ssim"
    return Explained("random_logit", ours, ((inputs, other),), tuple(peers), note)


class GivenCams:
    """A torch-cam CAM extractor (``torchcam.metrics._CAMExtractor``'s protocol) whose CAMs are given: faithbench's
    masks, at the input's size and in [0, 1], so that torch-cam neither rescales them nor resizes them (its bilinear
    resize to the same size is the identity)."""

    def __init__(self, model: nn.Module, cams: Tensor) -> None:
        self.model, self.cams = model, cams

    def __call__(self, class_idx: Any = None, scores: Any = None, normalized: bool = True, **_: Any) -> list[Tensor]:
        return [self.cams]

    def fuse_cams(self, cams: list[Tensor]) -> Tensor:
        return cams[0]

    def _hooks_off(self) -> Any:
        import contextlib

        return contextlib.nullcontext()


def average_drop_quantity(
    module: nn.Module,
    inputs: Tensor,
    maps: Tensor,
    targets: Tensor,
    *,
    activation: str,
    chunk_size: int,
    torchcam: bool,
) -> tuple[Callable[[], Any], list[Peer], Callable[[Any, Any], tuple[Tensor, list[float]]], str]:
    """(faithbench's Average Drop and Increase in Confidence of ``maps`` on ``inputs`` (model-input space) with the
    probabilities they came from, torch-cam's peer on every image, the pair of batch means each side's result gives
    (faithbench's with torch-cam's 1e-7), a note)."""
    b = inputs.shape[0]

    def probability(x: Tensor) -> Tensor:
        with torch.no_grad():
            p = [to_probabilities(module(x[s : s + chunk_size]), activation) for s in range(0, b, chunk_size)]
        return torch.cat(p).gather(1, targets.view(-1, 1)).squeeze(1)

    def ours() -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        mask, _ = positive_mask(maps, tuple(inputs.shape[-2:]))
        y, o = probability(inputs), probability(inputs * mask)
        return drop_and_increase(y, o), (y, o)

    def means(ours_result: Any, theirs_result: Any) -> tuple[Tensor, list[float]]:
        y, o = ours_result[1]
        drop, increase = drop_and_increase(y.double() + TORCHCAM_EPS, o.double() + TORCHCAM_EPS)
        return torch.stack([drop.mean(), increase.mean()]) / 100, [theirs_result["avg_drop"],
                                                                   theirs_result["conf_increase"]]  # fmt: skip

    peers = []
    if torchcam:
        from torchcam.metrics import ClassificationMetric

        cams = positive_mask(maps, tuple(inputs.shape[-2:]))[0][:, 0]
        classes = [int(t) for t in targets.tolist()]
        readout = partial(to_probabilities, activation=activation)

        def theirs() -> dict[str, float]:
            metric = ClassificationMetric(GivenCams(module, cams), readout)
            metric.update(inputs, class_idx=classes)
            return metric.summary()

        peers.append(Peer("torchcam", theirs, b))
    note = "positive part over its max times the model input, the class's probability; torch-cam gets the masks"
    return ours, peers, means, note
