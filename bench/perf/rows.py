"""The rows of one case of ``python -m bench perf`` (what they mean: :mod:`faithbench.bench.perf.harness`): every
faithbench call timed in turns with its limit and, where a peer (Quantus, captum, torch-cam) defines the quantity,
with the peer (:func:`faithbench.bench.perf.timing.in_turns`)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.bench.perf.cases import PARTS, PerfCase, PerfSizes
from faithbench.bench.perf.limits import Limit, Work, explained_limit, method_limit
from faithbench.bench.perf.peers import (
    adcc_quantity,
    average_drop_quantity,
    continuity_quantity,
    random_logit_quantity,
)
from faithbench.bench.perf.perturbed import RobustQuantity, infidelity_quantity, robust_quantities
from faithbench.bench.perf.quantus import agreement, paired_quantities
from faithbench.bench.perf.randomised import randomisation_tests
from faithbench.bench.perf.timing import (
    CallCounter,
    Probe,
    Side,
    build_model,
    in_turns,
    pair_ratio,
    probe,
    replay,
)
from faithbench.metrics import comprehensiveness_sufficiency, pixel_deletion, pixel_insertion
from faithbench.metrics.compactness import mst_compactness
from faithbench.metrics.flipping import pixel_flipping
from faithbench.metrics.road import road
from faithbench.models.adapter import ModelAdapter

METRIC_LIMIT = "the same model calls alone, no_grad"


@dataclass(frozen=True)
class Against:
    """A peer's side of a comparison (Quantus' or captum's): its function, the images it is timed on, and a check of
    its result."""

    fn: Callable[[], Any]
    n_images: int
    agrees: Callable[[Any, Any], tuple[bool, float]]  # (faithbench's result, the peer's result) -> (agrees, gap)
    peer: str = "quantus"


class _Rows:
    """The rows of one case, and the timing of each comparison."""

    def __init__(self, case: PerfCase, sizes: PerfSizes, device: torch.device, module: nn.Module) -> None:
        self.case, self.sizes, self.device = case, sizes, device
        self.counter = CallCounter(module)
        self.rows: list[dict] = []

    def add(self, kind: str, what: str, impl: str, n: int, side: Side, **extra: Any) -> dict:
        row = {
            "kind": kind,
            "what": what,
            "implementation": impl,
            "model": self.case.model,
            "device": str(self.device),
            "n_images": n,
            "pairs": len(side.times),
            "seconds": side.seconds,
            "seconds_min": side.low,
            "seconds_max": side.high,
            "images_per_s": n / side.seconds if side.seconds > 0 else math.inf,
            "model_calls": len(side.sizes),
            "model_inputs": sum(side.sizes),
            "peak_memory_mb": side.peak_mb,
            **extra,
        }
        self.rows.append(row)
        return row

    def compare(
        self,
        kind: str,
        what: str,
        fn: Callable[[], Any],
        n: int,
        note: str,
        limit: Callable[[Probe], Limit | None] | None,
        quantus: Against | None = None,
        peers: tuple[Against, ...] = (),
    ) -> dict:
        """faithbench's ``fn`` timed in turns with its limit (built from the model calls of an untimed first run
        of ``fn``) and with its peers (Quantus, captum): its row, the limit's and the peers' rows after it."""
        first = probe(fn, self.counter)
        bound = limit(first) if limit is not None else None
        peers = (*([quantus] if quantus else []), *peers)
        fns = [fn, *([bound.run] if bound else []), *(p.fn for p in peers)]
        sizes = self.sizes
        sides = in_turns(
            fns,
            repeats=sizes.repeats,
            warmup=sizes.warmup,
            device=self.device,
            counter=self.counter,
            min_seconds=sizes.min_seconds,
        )
        ours = sides[0]
        row = self.add(kind, what, "faithbench", n, ours, note=note, status="")
        if bound is not None:
            ratio = pair_ratio(ours, sides[1])
            row.update(
                ratio_to_limit=ratio.median,
                ratio_to_limit_min=ratio.low,
                ratio_to_limit_max=ratio.high,
                status=ratio.status,
            )
            self.add(kind, what, "limit", n, sides[1], note=bound.note)
        for peer, theirs in zip(peers, sides[len(sides) - len(peers) :], strict=True):
            agrees, gap = peer.agrees(ours.result, theirs.result)
            row.update(
                agrees=bool(row.get("agrees", True)) and agrees, max_abs_diff=max(row.get("max_abs_diff", 0), gap)
            )
            self.add(kind, what, peer.peer, peer.n_images, theirs, agrees=agrees, max_abs_diff=gap, note=note)
            if agrees:  # a disagreeing pair gets no ratio; per image: faithbench on n, the peer on n_images
                ratio = pair_ratio(ours, theirs, scale=peer.n_images / n)
                column = f"ratio_to_{peer.peer}"
                row.update({column: ratio.median, f"{column}_min": ratio.low, f"{column}_max": ratio.high})
        return row


def _metric_rows(
    out: _Rows,
    adapter: ModelAdapter,
    images: Tensor,
    inputs: Tensor,
    maps: Tensor,
    grids: Tensor,
    targets: Tensor,
    quantus: Any,
    parts: tuple[str, ...] = PARTS,
) -> list[str]:
    """The metrics of one case (``parts``: ``metrics``, ``robustness`` or both) and, with ``quantus``, the quantities
    it shares with faithbench (torch-cam's Average Drop where installed); returns notes."""
    case, sizes, module = out.case, out.sizes, adapter.module
    notes = _robustness_rows(out, adapter, images, inputs, maps, targets, quantus) if "robustness" in parts else []
    if "metrics" not in parts:
        return notes
    common: dict[str, Any] = {"baseline": 0.0, "activation": adapter.activation, "chunk_size": sizes.chunk_size}
    curve = {"block_size": case.block_size, **({"fractions": sizes.fractions} if sizes.fractions else {})}
    n_fractions = len(sizes.fractions) if sizes.fractions else "ALOE's 11"
    b = inputs.shape[0]

    def replayed(first: Probe) -> Limit:
        return Limit(replay(module, first.inputs), METRIC_LIMIT)

    for name, fn in (("pixel_deletion", pixel_deletion), ("pixel_insertion", pixel_insertion)):
        note = f"{n_fractions} fractions, blocks of {case.block_size}px"
        call = lambda fn=fn: fn(module, inputs, maps, targets, **curve, **common)  # noqa: E731
        out.compare("metric", name, call, b, note, replayed)
    out.compare(
        "metric",
        "comprehensiveness_sufficiency",
        lambda: comprehensiveness_sufficiency(
            module, inputs, maps, targets, fractions=sizes.erasure_fractions, **common
        ),
        b,
        "eraser summary, pixel features",
        replayed,
    )
    out.compare(
        "metric",
        "pixel_flipping",
        lambda: pixel_flipping(
            module, inputs, maps, targets, block_size=case.block_size, **_fractions(sizes), **common
        ),
        b,
        f"MoRF and LeRF (morf, lerf, srg), {n_fractions} fractions, blocks of {case.block_size}px, constant fill",
        replayed,
    )
    out.compare(
        "metric",
        "road",
        lambda: road(
            module,
            images,
            maps,
            targets,
            encode=adapter.encode,
            fractions=sizes.road_fractions,
            activation=adapter.activation,
            chunk_size=sizes.chunk_size,
        ),
        b,
        f"{len(sizes.road_fractions)} fractions, noisy linear imputation (multigrid-preconditioned CG, float32) on the "
        "device: the limit is the model calls alone",
        replayed,
    )
    torchcam = importlib.util.find_spec("torchcam") is not None
    ours, peers, means, note = average_drop_quantity(module, inputs, maps, targets, activation=adapter.activation,
                                                     chunk_size=sizes.chunk_size, torchcam=torchcam)  # fmt: skip
    against = tuple(Against(p.fn, p.n_images, lambda o, t: agreement(*means(o, t)), p.peer) for p in peers)
    out.compare("metric", "average_drop", ours, b, note, replayed, peers=against)
    notes += [] if torchcam else [f"{case.model}: torch-cam is not installed: no torchcam rows"]
    note = "pixel maps, percentile 80, k 20 (Quantus main's); no peer: MSTC is not in Quantus 0.6.0; no model work"
    out.compare("metric", "mst_compactness", lambda: mst_compactness(maps).values, b, note, None)
    if quantus is None:
        return notes
    paired, skipped = paired_quantities(
        quantus,
        module,
        inputs,
        maps,
        grids,
        targets,
        block_size=case.block_size,
        steps=sizes.flip_steps,
        regions=sizes.regions,
        n_quantus=sizes.n_quantus,
        chunk_size=sizes.chunk_size,
    )
    for p in paired:

        def agrees(ours: Any, theirs: Any, p: Any = p) -> tuple[bool, float]:
            return agreement(p.check() if p.check else ours[: p.n_quantus], theirs)

        against = Against(p.quantus, p.n_quantus, agrees)
        out.compare("metric", p.what, p.faithbench, p.n_images, p.note, replayed if p.uses_model else None, against)
    return notes + [f"{case.model}: {n}" for n in skipped]


def _robustness_rows(
    out: _Rows, adapter: ModelAdapter, images: Tensor, inputs: Tensor, maps: Tensor, targets: Tensor, quantus: Any
) -> list[str]:
    """The robustness family and infidelity (:mod:`faithbench.bench.perf.perturbed`), continuity and RandomLogit
    (:mod:`faithbench.bench.perf.peers`), eMPRT and sMPRT (:mod:`faithbench.bench.perf.randomised`), ADCC; returns
    notes."""
    sizes, b = out.sizes, inputs.shape[0]
    method = get_method(sizes.robust_method, **sizes.method_params.get(sizes.robust_method, {}))
    try:
        method.check(adapter)
    except UnsupportedMethodError as exc:
        return [f"{out.case.model}: no robustness rows: {exc}"]
    captum = importlib.util.find_spec("captum") is not None

    def explain(x: Tensor, t: Tensor) -> Tensor:
        return method.attribute(adapter, x, t, max_batch=sizes.chunk_size)

    draws = {"n_draws": sizes.robust_draws, "radius": sizes.robust_radius, "n_quantus": sizes.n_quantus}
    robust_maps = explain(inputs, targets)
    for q in robust_quantities(explain, adapter.module, inputs, targets, quantus=quantus, captum=captum, **draws):

        def limit(first: Probe, q: RobustQuantity = q) -> Limit | None:
            return method_limit(Work(adapter, method, *q.limit_inputs, sizes.chunk_size, first.inputs))

        peers = tuple(
            Against(p.fn, p.n_images, lambda o, t, n=p.n_images: agreement(o[:n], t), p.peer) for p in q.peers
        )
        out.compare("metric", q.what, q.faithbench, b, f"{sizes.robust_method}, {q.note}", limit, peers=peers)
    explained = [continuity_quantity(explain, adapter.module, inputs, targets, robust_maps, quantus=quantus,
                                     n_steps=sizes.continuity_steps, n_quantus=sizes.n_quantus),
                 random_logit_quantity(explain, adapter.module, inputs, targets, robust_maps, quantus=quantus,
                                       n_classes=adapter.num_classes, n_quantus=sizes.n_quantus)]  # fmt: skip
    for e in explained:
        peers = tuple(
            Against(p.fn, p.n_images, lambda o, t, n=p.n_images: agreement(o[:n], t), p.peer) for p in e.peers
        )
        limit = partial(explained_limit, adapter, method, sizes.chunk_size, e.explains)
        out.compare("metric", e.what, e.faithbench, b, f"{sizes.robust_method}, {e.note}", limit, peers=peers)
    for r in randomisation_tests(adapter, method, images, inputs, targets, robust_maps, sizes=sizes, quantus=quantus):
        peers = tuple(Against(p.fn, p.n_images, lambda o, t, r=r: agreement(*r.pair(o, t)), p.peer) for p in r.peers)
        out.compare("metric", r.what, r.faithbench, b, f"{sizes.robust_method}, {r.note}", r.limit, peers=peers)
    ours, limit, note = adcc_quantity(adapter, method, images, inputs, targets, robust_maps, sizes.chunk_size)
    out.compare("metric", "adcc", ours, b, f"{sizes.robust_method}, {note}", limit)
    ours, peers, _, note = infidelity_quantity(adapter.module, images, adapter.encode, maps, targets,
                                               n_perturbations=sizes.infidelity_perturbations, captum=captum,
                                               chunk_size=sizes.chunk_size)  # fmt: skip
    against = tuple(Against(p.fn, p.n_images, lambda o, t, n=p.n_images: agreement(o[:n], t), p.peer) for p in peers)
    out.compare("metric", "infidelity", ours, b, note, lambda first: Limit(replay(adapter.module, first.inputs),
                METRIC_LIMIT), peers=against)  # fmt: skip
    return [] if captum else [f"{out.case.model}: captum is not installed: no captum rows"]


def _fractions(sizes: PerfSizes) -> dict[str, Any]:
    """Pixel flipping's fractions: the case's deletion fractions with 0 and 1 (both curves span the whole removal)."""
    if not sizes.fractions:
        return {}
    return {"fractions": tuple(sorted({0.0, *sizes.fractions, 1.0}))}


def case_rows(
    case: PerfCase,
    sizes: PerfSizes,
    device: torch.device,
    seed: int,
    quantus: ModuleType | None,
    parts: tuple[str, ...] = PARTS,
) -> tuple[list[dict], list[str]]:
    """(rows, notes) of one model: its metrics, their Quantus counterparts and limits, its methods and theirs (those
    of ``parts``)."""
    adapter = build_model(case.model, device, seed)
    s, b = case.image_size, case.batch_size
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(b, adapter.encoding.image_channels, s, s, generator=gen)
    inputs = adapter.encode(images).to(device)
    # The predicted classes: with random targets a random-weight ResNet's probabilities are ~1e-40 and any two
    # deletion curves would agree.
    targets = adapter.predict_logits(images, batch_size=sizes.chunk_size, device=device).argmax(dim=1).to(device)
    maps = torch.randn(b, s, s, generator=gen).to(device)
    grids = torch.randn(max(1, b // 4), 4, 2 * s, 2 * s, generator=gen).to(device)
    out = _Rows(case, sizes, device, adapter.module)
    notes: list[str] = []
    try:
        notes += _metric_rows(out, adapter, images.to(device), inputs, maps, grids, targets, quantus, parts)
        for name in case.methods if "methods" in parts else ():
            params = sizes.method_params.get(name, {})
            method = get_method(name, **params)
            try:
                method.check(adapter)
            except UnsupportedMethodError as exc:
                notes.append(f"skipped: {exc}")
                continue

            def limit(first: Probe, method: Any = method) -> Limit | None:
                return method_limit(Work(adapter, method, inputs, targets, sizes.chunk_size, first.inputs))

            def attribute(method: Any = method) -> Tensor:
                return method.attribute(adapter, inputs, targets, max_batch=sizes.chunk_size)

            note = ", ".join(f"{k}={v}" for k, v in params.items())
            row = out.compare("method", name, attribute, b, note, limit)
            if "ratio_to_limit" not in row:
                notes.append(f"{case.model}: {name} has no limit: no ratio")
    finally:
        out.counter.close()
    return out.rows, notes
