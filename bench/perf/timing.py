"""The timing engine of ``python -m bench perf`` (what each row measures: :mod:`faithbench.bench.perf.harness`)."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
from torch import Tensor, nn

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.bench.perf.cases import PerfCase, PerfSizes
from faithbench.bench.perf.quantus import agreement, paired_quantities
from faithbench.metrics import comprehensiveness_sufficiency, pixel_deletion, pixel_insertion
from faithbench.models import MODELS, load_model
from faithbench.models.adapter import ModelAdapter


@dataclass(frozen=True)
class Timing:
    """The median seconds of the timed runs, the last run's result and model-call batch sizes, the peak memory."""

    seconds: float
    result: Any
    sizes: tuple[int, ...]
    peak_mb: float


class CallCounter:
    """Records the batch size of every call of ``module`` (a forward pre-hook) until ``close``."""

    def __init__(self, module: nn.Module) -> None:
        self.sizes: list[int] = []
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        first = next((v for v in (*args, *kwargs.values()) if isinstance(v, Tensor)), None)
        self.sizes.append(1 if first is None or first.dim() == 0 else int(first.shape[0]))

    def close(self) -> None:
        self._handle.remove()


def measure(fn: Callable[[], Any], device: torch.device, counter: CallCounter, repeats: int, warmup: int) -> Timing:
    """Median wall time of ``fn`` over ``repeats`` runs after ``warmup`` runs (CUDA: synchronised;
    peak memory = ``max_memory_allocated`` over the timed runs, NaN on the CPU)."""
    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    times, peak = [], math.nan
    for _ in range(repeats):
        counter.sizes.clear()
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        result = fn()
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        if cuda:
            peak = max(0.0 if math.isnan(peak) else peak, torch.cuda.max_memory_allocated(device) / 2**20)
    return Timing(statistics.median(times), result, tuple(counter.sizes), peak)


def replay(module: nn.Module, example: Tensor, sizes: Sequence[int]) -> Callable[[], None]:
    """A metric's limit: ``module`` on inputs of the same batch sizes, in the same order, under no_grad
    (the inputs are built once, outside the timed function)."""
    big = example[torch.arange(max(sizes, default=1), device=example.device) % example.shape[0]].contiguous()

    def run() -> None:
        with torch.no_grad():
            for n in sizes:
                module(big[:n])

    return run


def forward_backward(module: nn.Module, inputs: Tensor, targets: Tensor) -> Callable[[], Tensor]:
    """The methods' limit: one forward and one backward of the batch (d target logits / d input)."""

    def run() -> Tensor:
        x = inputs.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(module(x).gather(1, targets.view(-1, 1)).sum(), x)
        return grad

    return run


def build_model(name: str, device: torch.device, seed: int) -> ModelAdapter:
    """A registered model; torchvision ones with random weights (seeded), as the timing needs no training."""
    torch.manual_seed(seed)
    kwargs = {"weights": None} if MODELS.get(name).source == "torchvision" else {}
    return load_model(name, device=device, **kwargs)


class _Rows:
    """The rows of one case, and the timing of each."""

    def __init__(self, case: PerfCase, sizes: PerfSizes, device: torch.device, module: nn.Module) -> None:
        self.case, self.sizes, self.device, self.module = case, sizes, device, module
        self.counter = CallCounter(module)
        self.rows: list[dict] = []

    def time(self, fn: Callable[[], Any]) -> Timing:
        return measure(fn, self.device, self.counter, self.sizes.repeats, self.sizes.warmup)

    def add(self, kind: str, what: str, impl: str, n: int, t: Timing, **extra: Any) -> dict:
        row = {
            "kind": kind,
            "what": what,
            "implementation": impl,
            "model": self.case.model,
            "device": str(self.device),
            "n_images": n,
            "seconds": t.seconds,
            "images_per_s": n / t.seconds if t.seconds > 0 else math.inf,
            "model_calls": len(t.sizes),
            "model_inputs": sum(t.sizes),
            "peak_memory_mb": t.peak_mb,
            **extra,
        }
        self.rows.append(row)
        return row

    def metric(
        self, what: str, fn: Callable[[], Any], n: int, note: str, example: Tensor | None
    ) -> tuple[Timing, dict]:
        """faithbench's row, and with ``example`` (model inputs) the limit row replaying its model calls."""
        ours = self.time(fn)
        row = self.add("metric", what, "faithbench", n, ours, note=note)
        if example is not None:
            limit = self.time(replay(self.module, example, ours.sizes))
            row["ratio_to_limit"] = ours.seconds / limit.seconds
            self.add("metric", what, "limit", n, limit, note="the same model calls alone, no_grad")
        return ours, row


def case_rows(
    case: PerfCase, sizes: PerfSizes, device: torch.device, seed: int, quantus: ModuleType | None
) -> tuple[list[dict], list[str]]:
    """(rows, notes) of one model: its metrics, their Quantus counterparts and limits, its methods."""
    adapter = build_model(case.model, device, seed)
    s, b = case.image_size, case.batch_size
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(b, adapter.encoding.image_channels, s, s, generator=gen)
    inputs = adapter.encode(images).to(device)
    # The predicted classes: with random targets a random-weight ResNet's probabilities are ~1e-40 and any two
    # deletion curves would agree.
    targets = adapter.predict_logits(images, batch_size=sizes.chunk_size, device=device).argmax(dim=1).to(device)
    maps = torch.randn(b, s, s, generator=gen).to(device)
    grid_maps = torch.randn(max(1, b // 4), 4, 2 * s, 2 * s, generator=gen).to(device)
    module, notes = adapter.module, []
    out = _Rows(case, sizes, device, module)
    common: dict[str, Any] = {"baseline": 0.0, "activation": adapter.activation, "chunk_size": sizes.chunk_size}
    curve = {"block_size": case.block_size, **({"fractions": sizes.fractions} if sizes.fractions else {})}
    n_fractions = len(sizes.fractions) if sizes.fractions else "ALOE's 11"
    try:
        for name, fn in (("pixel_deletion", pixel_deletion), ("pixel_insertion", pixel_insertion)):
            note = f"{n_fractions} fractions, blocks of {case.block_size}px"
            out.metric(name, lambda fn=fn: fn(module, inputs, maps, targets, **curve, **common), b, note, inputs)
        out.metric(
            "comprehensiveness_sufficiency",
            lambda: comprehensiveness_sufficiency(
                module, inputs, maps, targets, fractions=sizes.erasure_fractions, **common
            ),
            b,
            "eraser summary, pixel features",
            inputs,
        )
        if quantus is not None:
            paired, skipped = paired_quantities(
                quantus,
                module,
                inputs,
                maps,
                grid_maps,
                targets,
                block_size=case.block_size,
                steps=sizes.flip_steps,
                regions=sizes.regions,
                n_quantus=sizes.n_quantus,
                chunk_size=sizes.chunk_size,
            )
            notes += [f"{case.model}: {n}" for n in skipped]
            for p in paired:
                theirs = out.time(p.quantus)
                ours, row = out.metric(p.what, p.faithbench, p.n_images, p.note, inputs if p.uses_model else None)
                agrees, gap = agreement(p.check() if p.check else ours.result[: p.n_quantus], theirs.result)
                row.update(agrees=agrees, max_abs_diff=gap)
                out.add("metric", p.what, "quantus", p.n_quantus, theirs, agrees=agrees, max_abs_diff=gap, note=p.note)
                if agrees:  # a disagreeing pair gets no ratio
                    row["ratio_to_quantus"] = (ours.seconds / p.n_images) / (theirs.seconds / p.n_quantus)

        fb = out.time(forward_backward(module, inputs, targets))
        out.add("method", "forward+backward", "limit", b, fb, note="one forward + backward of the batch")
        for name in case.methods:
            params = sizes.method_params.get(name, {})
            method = get_method(name, **params)
            try:
                method.check(adapter)
            except UnsupportedMethodError as exc:
                notes.append(f"skipped: {exc}")
                continue
            t = out.time(lambda m=method: m.attribute(adapter, inputs, targets, max_batch=sizes.chunk_size))
            note = ", ".join(f"{k}={v}" for k, v in params.items())
            out.add("method", name, "faithbench", b, t, note=note, ratio_to_limit=t.seconds / fb.seconds)
    finally:
        out.counter.close()
    return out.rows, notes
