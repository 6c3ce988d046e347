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
  that 1e-7. Limit: the two model calls of each chunk (image, masked image) replayed;
* ``adcc`` (:func:`adcc_quantity`; no peer: torch-cam 0.5.0 and Quantus 0.6.0 define no ADCC): faithbench's ADCC with
  its ``adcc_coherency`` and ``adcc_complexity`` in one unit (:func:`perf_unit`), the suite's path: the method's maps
  of the images given (a suite's sample maps, outside the time), the mask multiplying the image (``space = "image"``,
  the suite's default), the class's probability on the images and on the masked images, and the masked images
  explained again for coherency. Limit: the no_grad forwards of the images and of the masked images, then the
  method's limit on the masked images.
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
from faithbench.bench.perf.limits import LIMITS, Limit, explained_limit, forward_passes
from faithbench.bench.perf.perturbed import Peer
from faithbench.bench.perf.quantus import PER_MAP
from faithbench.bench.perf.timing import Probe, replay
from faithbench.metrics.cam_scores import (
    CamScoreConfig,
    drop_and_increase,
    evaluate_adcc,
    evaluate_coherency,
    evaluate_complexity,
    positive_mask,
)
from faithbench.metrics.continuity import continuity, fill_values, translate, translation_shifts
from faithbench.metrics.sanity import map_similarity, other_classes
from faithbench.metrics.spec import MetricResult, Unit
from faithbench.models.adapter import ModelAdapter

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


def perf_unit(
    adapter: ModelAdapter,
    method: Any,
    images: Tensor,
    inputs: Tensor,
    targets: Tensor,
    chunk_size: int,
    cache: dict | None = None,
) -> Unit:
    """A fresh suite unit of the case's batch (sample ids 0..B-1, the targets as labels, ``chunk_size`` inputs per
    call): its samples are ``inputs`` as given (not encoded again), nothing else is cached but ``cache`` (e.g. the
    sample maps under ``("explanation", "samples")``), so every timed call does the metric's whole work."""
    ids = torch.arange(inputs.shape[0])
    return Unit(model=adapter, method=method, images=images, labels=targets, sample_ids=ids, batch_size=chunk_size,
                device=inputs.device, max_batch=chunk_size, model_cache={"samples": (inputs, targets, ids)},
                cache=dict(cache or {}))  # fmt: skip


def adcc_quantity(
    adapter: ModelAdapter, method: Any, images: Tensor, inputs: Tensor, targets: Tensor, maps: Tensor, chunk_size: int
) -> tuple[Callable[[], tuple[MetricResult, MetricResult, MetricResult]], Callable[[Probe], Limit | None], str]:
    """(faithbench's ADCC, coherency and complexity of ``method``'s ``maps`` of ``images`` (in [0, 1]; ``inputs``
    their encoding) for ``targets``, its limit, a note)."""
    cfg = CamScoreConfig()

    def ours() -> tuple[MetricResult, MetricResult, MetricResult]:
        unit = perf_unit(adapter, method, images, inputs, targets, chunk_size, {("explanation", "samples"): maps})
        return evaluate_adcc(unit, cfg), evaluate_coherency(unit, cfg), evaluate_complexity(unit, cfg)

    masked = adapter.encode(images * positive_mask(maps, tuple(images.shape[-2:]))[0])

    def limit(first: Probe) -> Limit | None:
        explained = explained_limit(adapter, method, chunk_size, ((masked, targets),), first)
        if explained is None or LIMITS.get(method.name) is forward_passes:
            return explained  # a limit that replays the run's model calls replays the forwards too
        calls = [x[s : s + chunk_size] for x in (inputs, masked) for s in range(0, len(x), chunk_size)]
        forwards = replay(adapter.module, calls)

        def run() -> None:
            forwards()
            explained.run()

        note = f"the images' and the masked images' forwards, no_grad; {explained.note} of the masked images"
        return Limit(run, note)

    note = ("with adcc_coherency and adcc_complexity (one unit); the method's maps given, their positive part over its "
            "max times the image; no peer defines ADCC")  # fmt: skip
    return ours, limit, note
