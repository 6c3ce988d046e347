"""The runner: suite -> (model x method) units -> per-sample metric scores -> result files.

A unit explains one model with one method and computes every requested metric from those
explanations. Finished units are saved atomically and skipped when the same command runs again
(resume). Under ``torchrun`` every rank evaluates a shard of the grids / samples and rank 0
gathers the per-sample scores, so the results equal a single-process run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm.auto import tqdm

from attributions import UnsupportedMethodError, get_method
from attributions.base import AttributionMethod
from bench.data import EvalData, load_data
from bench.results import RunStore, provenance
from bench.suite import IMAGE_METRICS, Suite
from faithbench.io import atomic_torch_save, atomic_write_text
from metrics import (
    ALOE_FRACTIONS,
    comprehensiveness_sufficiency,
    get_preset,
    grid_pointing_game,
    gridpg_maps,
    make_grids,
    pixel_deletion,
    pixel_insertion,
    select_grids,
)
from metrics.registry import METRICS
from models import load_model
from models.adapter import ModelAdapter
from models.training import predict_logits

SAMPLE_METRICS = tuple(m for m in IMAGE_METRICS if m != "gridpg")  # computed from per-image maps


# --------------------------------------------------------------------------- distribution


@dataclass
class Shard:
    """This process's share of the work: items i with i % world == rank."""

    rank: int = 0
    world: int = 1

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @classmethod
    def from_env(cls) -> Shard:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        return cls(dist.get_rank(), dist.get_world_size())

    def take(self, n: int) -> Tensor:
        return torch.arange(self.rank, n, self.world)

    def gather(self, obj: Any) -> list[Any] | None:
        if not self.distributed:
            return [obj]
        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj: Any) -> Any:
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


# --------------------------------------------------------------------------- per-model preparation


@dataclass
class Prepared:
    """What every method of one model shares: its grids and its sample images."""

    grids: Tensor | None  # (G, C, H, W) encoded
    grid_images: Tensor | None  # (G, c, H, W) in [0, 1], for the report
    grid_labels: Tensor | None  # (G, N^2)
    grid_size: int
    grid_info: dict
    sample_ids: Tensor  # (S,) indices into the data set
    samples: Tensor  # (S, C, H, W) encoded
    sample_labels: Tensor
    display_image: Tensor  # (c, 2h, 2w): the same 2x2 grid for every model, for the report's panel
    display_labels: Tensor  # (1, 4)


def prepare(model: ModelAdapter, data: EvalData, suite: Suite, device: torch.device) -> Prepared:
    gen = torch.Generator().manual_seed(suite.seed)
    ids = torch.randperm(len(data.labels), generator=gen)[: suite.n_samples].sort().values
    grids = grid_images = grid_labels = None
    grid_size, info = 0, {}
    if "gridpg" in suite.metrics:
        preset = get_preset(suite.gridpg.get("preset", "bcos-v2"))
        logits = predict_logits(model.module, model.encode, data.images, 4 * suite.batch_size, device)
        sel = select_grids(
            preset,
            data.labels,
            logits,
            is_vit=model.is_vit,
            n_grids=suite.gridpg.get("n_grids", 24),
            probabilities=model.probabilities,
        )
        grid_size = preset.grid_size(model.is_vit)
        grid_images = make_grids(data.images, sel.indices, tiling=preset.tiling)
        grids = model.encode(grid_images).to(device)
        grid_labels = data.labels[sel.indices].to(device)
        cell = data.images.shape[-1]
        if len(sel.indices) == 0:
            print(
                f"[faithbench] no GridPG grid for {model.name}: too few confidently classified images per class",
                file=sys.stderr,
            )
        info = {
            "preset": preset.name,
            "grid_size": grid_size,
            "smooth": preset.smoothing_kernel(cell),
            "n_grids": int(sel.indices.shape[0]),
            "n_candidates": sel.n_candidates,
            "n_dropped": sel.n_dropped,
        }
    first = [int((data.labels == k).nonzero()[0]) for k in data.labels.unique()[:4]]  # model-independent
    display = make_grids(data.images, torch.tensor([first]), tiling="row-major")[0]
    return Prepared(
        grids,
        grid_images,
        grid_labels,
        grid_size,
        info,
        ids,
        model.encode(data.images[ids]).to(device),
        data.labels[ids].to(device),
        display,
        data.labels[first].view(1, 4).to(device),
    )


# --------------------------------------------------------------------------- one unit


def _explain(method: AttributionMethod, model: ModelAdapter, x: Tensor, t: Tensor, batch: int) -> Tensor:
    return torch.cat([method.attribute(model, x[s : s + batch], t[s : s + batch]) for s in range(0, len(x), batch)])


def _record(
    metric: str,
    values: Tensor,
    undefined: Tensor,
    ids: Tensor,
    params: dict,
    explain_s: float,
    metric_s: float,
    curve: Tensor | None = None,
    fractions: Tensor | None = None,
) -> dict:
    spec = METRICS.get(metric)
    return {
        "values": (values.double() * spec.scale).cpu().tolist(),
        "undefined": undefined.cpu().tolist(),
        "sample_ids": ids.cpu().tolist(),
        "unit": spec.unit,
        "higher_is_better": spec.higher_is_better,
        "params": params,
        "explain_time_s": explain_s,
        "metric_time_s": metric_s,
        "curve": None if curve is None else curve.double().cpu().tolist(),
        "fractions": None if fractions is None else fractions.double().cpu().tolist(),
    }


def evaluate_unit(
    model: ModelAdapter, method: AttributionMethod, prep: Prepared, suite: Suite, shard: Shard
) -> tuple[dict[str, dict], dict]:
    """This shard's per-sample records of every metric, and example maps for the report."""
    records: dict[str, dict] = {}
    examples: dict[str, Tensor] = {}
    batch = suite.batch_size
    if "gridpg" in suite.metrics and len(prep.grids):
        g = shard.take(len(prep.grids)).to(prep.grids.device)
        preset = get_preset(prep.grid_info["preset"])
        start = time.perf_counter()
        maps = gridpg_maps(
            lambda x, t: method.attribute(model, x, t),
            prep.grids[g],
            prep.grid_labels[g],
            preset,
            is_vit=model.is_vit,
            chunk_size=batch,
        )
        explain_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = grid_pointing_game(
            maps,
            prep.grid_size,
            tiling=preset.tiling,
            smooth=prep.grid_info["smooth"],
            zero_mass=preset.zero_mass,
        )
        cells = prep.grid_size**2
        ids = (g.view(-1, 1) * cells + torch.arange(cells, device=g.device)).reshape(-1)
        records["gridpg"] = _record(
            "gridpg",
            scores.values.reshape(-1),
            scores.undefined.reshape(-1),
            ids,
            prep.grid_info,
            explain_s,
            time.perf_counter() - start,
        )
    if shard.rank == 0:  # the panel: cell 0's class explained on the same 2x2 grid for every model
        preset = get_preset(prep.grid_info.get("preset", "bcos-v2"))
        grid = model.encode(prep.display_image.unsqueeze(0).to(prep.samples.device))
        shown = gridpg_maps(
            lambda x, t: method.attribute(model, x, t),
            grid,
            prep.display_labels[:, :1],
            preset,
            is_vit=model.is_vit,
            grid_size=2,
        )
        examples.update(
            display_map=shown[0, 0].cpu(),
            display_image=prep.display_image.cpu(),
            display_label=int(prep.display_labels[0, 0]),
        )
    wanted = [m for m in SAMPLE_METRICS if m in suite.metrics]
    if wanted:
        s = shard.take(len(prep.samples)).to(prep.samples.device)
        x, t, ids = prep.samples[s], prep.sample_labels[s], prep.sample_ids[s.cpu()]
        start = time.perf_counter()
        maps = _explain(method, model, x, t, batch)
        explain_s = time.perf_counter() - start
        common = {"activation": model.activation, "chunk_size": 4 * batch}
        for name, fn in (("pixel_deletion", pixel_deletion), ("pixel_insertion", pixel_insertion)):
            if name in wanted:
                params = {
                    "block_size": suite.deletion.get("block_size", 16),
                    "baseline": 0.0,
                    "fractions": list(suite.deletion.get("fractions", ALOE_FRACTIONS)),
                }
                start = time.perf_counter()
                res = fn(
                    model.module,
                    x,
                    maps,
                    t,
                    block_size=params["block_size"],
                    fractions=params["fractions"],
                    baseline=0.0,
                    **common,
                )
                records[name] = _record(
                    name,
                    res.values,
                    res.undefined,
                    ids,
                    params,
                    explain_s,
                    time.perf_counter() - start,
                    res.curve,
                    res.fractions,
                )
        if "comprehensiveness" in wanted or "sufficiency" in wanted:
            params = {"summary": suite.erasure.get("summary", "eraser"), "baseline": 0.0}
            start = time.perf_counter()
            res = comprehensiveness_sufficiency(
                model.module, x, maps, t, summary=params["summary"], baseline=0.0, **common
            )
            spent = time.perf_counter() - start
            for name, part in (
                ("comprehensiveness", res.comprehensiveness),
                ("sufficiency", res.sufficiency),
            ):
                if name in wanted:
                    records[name] = _record(
                        name,
                        part.values,
                        part.undefined,
                        ids,
                        params,
                        explain_s,
                        spent,
                        part.curve,
                        part.fractions,
                    )
        for name in ("entropy", "entropy_normalised", "gini"):
            if name in wanted:
                start = time.perf_counter()
                res = METRICS.get(name).compute(maps)
                records[name] = _record(
                    name,
                    res.values,
                    res.undefined,
                    ids,
                    {"features": "pixels"},
                    explain_s,
                    time.perf_counter() - start,
                )
    return records, examples


def _merge(parts: list[dict[str, dict]]) -> dict[str, dict]:
    """Concatenate the shards' records of each metric, ordered by sample id."""
    merged: dict[str, dict] = {}
    for metric in parts[0]:
        recs = [p[metric] for p in parts]
        ids = [sid for r in recs for sid in r["sample_ids"]]
        order = sorted(range(len(ids)), key=ids.__getitem__)
        out = dict(recs[0])
        for field in ("values", "undefined", "sample_ids", "curve"):
            if recs[0][field] is not None:
                flat = [v for r in recs for v in r[field]]
                out[field] = [flat[i] for i in order]
        out["explain_time_s"] = max(r["explain_time_s"] for r in recs)
        out["metric_time_s"] = max(r["metric_time_s"] for r in recs)
        merged[metric] = out
    return merged


# --------------------------------------------------------------------------- the run


def _load_model_once(name: str, device: torch.device, shard: Shard) -> ModelAdapter:
    """Rank 0 builds (or loads) a zoo model first, so that ranks never build the same checkpoint at once."""
    if shard.distributed and shard.rank != 0:
        dist.barrier()
    model = load_model(name, device=device)
    if shard.distributed and shard.rank == 0:
        dist.barrier()
    return model


def unit_key(suite: Suite, model: str, method: str, method_params: dict) -> str:
    config = json.loads(suite.to_json())
    for k in ("name", "description", "models", "methods", "method_params"):
        config.pop(k, None)
    payload = {"config": config, "model": model, "method": method, "method_params": method_params}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available; use --device cpu")
    return dev


def run(suite: Suite, out: Path, device: str = "auto", progress: bool = True) -> Any:
    """Run (or resume) ``suite`` into folder ``out``; returns the results table (rank 0) or None."""
    shard = Shard.from_env()
    dev = resolve_device(device)
    if shard.distributed and dev.type == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", shard.rank)))
        torch.cuda.set_device(dev)
    store = RunStore(out)
    prov = provenance(dev, suite.seed)
    if shard.rank == 0:
        atomic_write_text(
            store.out / "run.json",
            json.dumps({"suite": json.loads(suite.to_json()), "provenance": prov}, indent=2),
        )
    data = load_data(suite)
    pairs = [(m, k) for m in suite.models for k in suite.methods]
    done: list[dict] = []
    skipped: list[dict] = []
    bar = tqdm(
        total=len(pairs),
        desc=f"suite {suite.name}",
        unit="unit",
        disable=not progress or shard.rank != 0,
        file=sys.stderr,
    )
    for model_name in suite.models:
        model = None
        prep = None
        for method_name in suite.methods:
            params = suite.method_params.get(method_name, {})
            key = unit_key(suite, model_name, method_name, params)
            cached = store.load_unit(model_name, method_name, key) if shard.rank == 0 else None
            cached = shard.broadcast(cached)
            bar.set_postfix_str(f"{model_name} / {method_name}")
            if cached is not None:
                done.append(cached)
                bar.update()
                continue
            if model is None:
                model = _load_model_once(model_name, dev, shard)
                prep = prepare(model, data, suite, dev)
            method = get_method(method_name, **params)
            try:
                method.check(model)
            except UnsupportedMethodError as exc:
                skipped.append({"model": model_name, "method": method_name, "reason": str(exc)})
                bar.update()
                continue
            records, examples = evaluate_unit(model, method, prep, suite, shard)
            parts = shard.gather(records)
            if shard.rank == 0:
                unit = {
                    "key": key,
                    "model": model_name,
                    "method": method_name,
                    "family": model.family,
                    "method_params": method.params,
                    "provenance": prov,
                    "metrics": _merge(parts),
                }
                store.save_unit(unit)
                atomic_torch_save(store.out / "examples" / f"{model_name}__{method_name}.pt", examples)
                done.append(unit)
                store.write_tables(done, suite.name)
            bar.update()
    bar.close()
    if shard.distributed:
        dist.barrier()
        dist.destroy_process_group()
    if shard.rank != 0:
        return None
    results = store.write_tables(done, suite.name)
    atomic_write_text(store.out / "skipped.json", json.dumps(skipped, indent=2))
    return results
