"""Model calls in chunks (faithbench.calls): a chunk that runs out of memory is tried again at the ladder's next size,
that size is kept for its key, other errors pass through, and one row that does not fit is one line. Then a whole run
whose model runs out of memory above a few rows finishes with the unforced run's scores and records the sizes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import faithbench
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite
from faithbench.calls import GPU_ROWS, forget_sizes, found_sizes, in_chunks, ladder, out_of_memory
from faithbench.errors import UserError
from faithbench.metrics import MetricResult, MetricSpec, register_metric
from faithbench.metrics.registry import METRICS
from faithbench.models import MODELS


@pytest.fixture(autouse=True)
def _fresh_sizes():
    forget_sizes()
    yield
    forget_sizes()


def _fits(limit: int, seen: list[tuple[int, int]]):
    def call(start: int, stop: int) -> list[int]:
        seen.append((start, stop))
        if stop - start > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return list(range(start, stop))

    return call


def test_the_ladder_halves_from_the_largest_size():
    assert [ladder(64, n) for n in (64, 40, 32, 17, 2)] == [32, 32, 16, 16, 1]
    assert ladder(48, 48) == 24 and ladder(1, 1) == 1


def test_a_chunk_out_of_memory_is_retried_smaller_and_the_size_kept():
    seen: list[tuple[int, int]] = []
    out = in_chunks(_fits(10, seen), 50, 64, key=("m", "gradient", (1, 28, 28), "with gradients"))
    assert [i for part in out for i in part] == list(range(50))  # every row once, in order
    # 50 rows, shorter than the 64 asked for: once more at 50 (it may have been the cache's), then 32, 16, 8
    assert seen[:5] == [(0, 50), (0, 50), (0, 32), (0, 16), (0, 8)]
    assert found_sizes() == {"m gradient (1, 28, 28) with gradients": 8}
    seen.clear()
    in_chunks(_fits(10, seen), 20, 64, key=("m", "gradient", (1, 28, 28), "with gradients"))
    assert seen == [(0, 8), (8, 16), (16, 20)]  # the next call starts at the size found
    seen.clear()
    in_chunks(_fits(100, seen), 20, 64, key=("other",))
    assert seen == [(0, 20)]  # another key is not affected


def test_a_short_last_chunk_that_fails_once_is_tried_again_at_its_size():
    failures = iter([True])  # the 1-row remainder fails once (fragmentation), then fits

    def call(start: int, stop: int) -> int:
        if stop - start == 1 and next(failures, False):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return stop - start

    assert in_chunks(call, 9, 8, key=("k",)) == [8, 1] and found_sizes() == {}  # no step down, no "one row" stop


def test_calls_are_keyed_by_the_model_name_and_a_number_never_reused():
    from faithbench.calls import call_key, name_calls

    net = nn.Linear(2, 2)
    name_calls(net, "my_model")
    assert call_key(net, (2,), "without") == ("my_model", "model", (2,), "without gradients")
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    assert call_key(a, (2,), "with")[0] != call_key(b, (2,), "with")[0]  # two unnamed modules: two keys
    assert call_key(a, (2,), "with") == call_key(a, (2,), "with")


def test_other_errors_pass_and_one_row_that_does_not_fit_is_one_line():
    def broken(start: int, stop: int) -> None:
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug"):
        in_chunks(broken, 4, 4)
    with pytest.raises(UserError, match=r"one row \(m predict\) does not fit in memory \(CUDA out of memory"):
        in_chunks(_fits(0, []), 4, 4, key=("m", "predict"))
    assert out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ..."))
    assert not out_of_memory(RuntimeError("shape mismatch"))
    with pytest.raises(ValueError, match="most must be >= 1"):
        in_chunks(_fits(1, []), 4, 0)


class _Tight(nn.Module):
    """A tiny CNN that raises CUDA's out-of-memory error for calls of more than ``limit`` rows (None: never)."""

    def __init__(self, limit: int | None):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                                 nn.Linear(16, 10))  # fmt: skip
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.limit is not None and x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory ({x.shape[0]} rows)")
        return self.net(x)


def _plain_and_tight(settings: dict, out) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-sample scores of ``settings`` run on the model ``tight`` as it is (into ``out/plain``) and out of
    memory above 5 rows (``out/tight``), each from fresh sizes."""
    try:
        for side, limit in (("plain", None), ("tight", 5)):
            forget_sizes()
            faithbench.wrap_model(_Tight(limit), name="tight", input_size=(28, 28), channels=1, num_classes=10)
            run(build_suite(settings, "test"), out / side, device="cpu", progress=False)
    finally:
        if "tight" in MODELS:
            MODELS.unregister("tight")
    return tuple(pd.read_csv(out / side / "samples.csv") for side in ("plain", "tight"))


def test_a_run_that_runs_out_of_memory_finishes_with_the_unforced_scores(tmp_path):
    settings = {
        "name": "oom", "models": ["tight"], "methods": ["gradient", "integrated_gradients"], "n_samples": 24,
        "metrics": ["pixel_deletion", "comprehensiveness", "road", "entropy"], "batch_size": 16, "max_batch": 64,
        "deletion": {"block_size": 7, "fractions": [0.0, 0.25, 0.5]}, "road": {"fractions": [0.25, 0.5]},
        "method_params": {"integrated_gradients": {"n_steps": 8}},
    }  # fmt: skip
    a, b = _plain_and_tight(settings, tmp_path)
    assert len(a) == len(b) > 0 and np.allclose(a["value"], b["value"], rtol=1e-5, atol=1e-6)
    units = [json.loads(p.read_text()) for p in (tmp_path / "tight" / "units").glob("*.json")]
    sizes = {k: v for u in units for k, v in u["call_sizes"].items()}
    assert sizes and all(v <= 5 for v in sizes.values())  # every size stepped to fits the model's 5 rows
    assert any("with gradients" in k for k in sizes) and any("without gradients" in k for k in sizes)
    plain = [json.loads(p.read_text()) for p in (tmp_path / "plain" / "units").glob("*.json")]
    assert all(u["call_sizes"] == {} for u in plain)


@dataclass(frozen=True)
class _GridConfig:
    side: int = 3


def _grid_share(unit, cfg):
    """A plugin metric with no cost hook: each sample tiled ``side`` x ``side`` and explained whole (inputs 9x a
    model input), the share of the map in its first tile, and the model's score of the grid (its own calls)."""
    x, t, ids = unit.samples()
    grids = x.repeat(1, 1, cfg.side, cfg.side)
    maps = unit.explain(grids, t).abs()
    cell = x.shape[-1]
    values = maps[:, :cell, :cell].sum((1, 2)) / maps.sum((1, 2)).clamp_min(1e-12)
    with torch.no_grad():
        values = (
            values + 0 * torch.cat(in_chunks(lambda s, e: unit.forward(grids[s:e]), len(grids), unit.eval_batch))[:, 0]
        )
    return MetricResult(values=values, undefined=torch.zeros_like(values, dtype=torch.bool), sample_ids=ids,
                        params={"side": cfg.side}, explained="grid_share")  # fmt: skip


def test_a_plugin_metric_without_a_cost_hook_is_never_called_beyond_what_fits(tmp_path):
    """Nothing sizes a plugin's calls ahead: from a GPU's top of the ladder, its grids (9x a model input) step down
    like every call, so a model that fits 5 rows finishes them with the unforced scores."""
    spec = MetricSpec(name="grid_share", description="first-tile share of a grid's map", higher_is_better=True,
                      evaluate=_grid_share, config=_GridConfig, table="grid_share")  # fmt: skip
    register_metric(spec)
    settings = {"name": "plugin", "models": ["tight"], "methods": ["gradient"], "metrics": ["grid_share"],
                "n_samples": 12, "batch_size": 12, "controls": False, "max_batch": GPU_ROWS}  # fmt: skip
    try:
        a, b = _plain_and_tight(settings, tmp_path)
    finally:
        METRICS.unregister("grid_share")
    assert len(a) == len(b) == 12 and np.allclose(a["value"], b["value"], rtol=1e-5, atol=1e-6)
    units = [json.loads(p.read_text()) for p in (tmp_path / "tight" / "units").glob("*.json")]
    assert any("(1, 84, 84)" in k and v <= 5 for u in units for k, v in u["call_sizes"].items())
