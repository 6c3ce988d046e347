"""Calls sized from a GPU's memory (issue 51, ``max_batch = "auto"``): the probes' bytes per input against hand-counted
networks, the sizes they give, the largest inputs a plan gives a model, and -- on the CPU, with the free memory of a
GPU stood in -- a memory-sized run that makes exactly the calls the dry run plans for a GPU, with the same scores."""

import argparse
import json

import pandas as pd
import pytest
import torch
from torch import nn

from faithbench.bench.cli.parser import max_batch_arg
from faithbench.bench.run import runner, sizing, work
from faithbench.bench.run.data import load_data
from faithbench.bench.run.estimate import estimate, input_scale, stand_in
from faithbench.bench.run.plan import plan
from faithbench.bench.run.sizing import (
    ASSUMED_FREE_GIB,
    CPU_MAX_BATCH,
    HEADROOM,
    LEAST,
    MOST,
    Sizes,
    image_probe,
    model_sizes,
    peak_bytes,
    row_bytes,
    saved_bytes,
)
from faithbench.bench.run.suite import build_suite, load_suite, with_overrides
from faithbench.errors import UserError
from faithbench.models import load_model
from tests.bench.test_estimate import SUITE, TOLERANCE

MIB = 2**20


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))


def test_the_probes_count_a_hand_counted_network():
    """Linear(10, 20) -> ReLU -> Linear(20, 5) in float32. With gradients autograd keeps, per row, the first layer's
    input (10 floats) and the ReLU's output (20 floats, which the second layer keeps too: one storage): 120 bytes; the
    weights are kept once whatever the rows. Without, the most alive at once is the first layer's output beside the
    ReLU's (20 + 20 floats): 160 bytes per row."""
    net = _mlp()
    assert row_bytes(net, torch.rand(1, 10)) == (120, 160)
    weights = 20 * 10 * 4  # the first layer keeps its weight for the input's gradient; the second keeps its own
    assert saved_bytes(net, torch.rand(7, 10)) == 7 * 120 + weights + 5 * 20 * 4
    assert peak_bytes(net, torch.rand(7, 10)) == 7 * 160


def test_the_no_gradient_peak_frees_what_the_forward_drops():
    """An in-place ReLU makes no new storage, and a view of a tensor keeps it alive until both are gone."""
    inplace = nn.Sequential(nn.Linear(10, 20), nn.ReLU(inplace=True), nn.Linear(20, 5))
    assert peak_bytes(inplace, torch.rand(8, 10)) == 8 * 20 * 4 + 8 * 5 * 4  # the first output, then beside it the last

    class Viewed(nn.Module):
        def forward(self, x):
            a = x * 2  # 40 bytes per row
            v = a[:, :5]  # a view: a's storage stays alive through v
            del a
            return v + 1  # 20 more bytes per row (a new storage of 5 floats)

    assert peak_bytes(Viewed(), torch.rand(4, 10)) == 4 * 40 + 4 * 20


def test_sizes_from_memory_known_answers():
    probe = lambda: (1 * MIB, MIB // 4)  # noqa: E731
    gib = 2**30
    # a number is used as given, on any device
    assert model_sizes(64, 512, 10 * gib, probe) == Sizes(64, 512)
    # auto on the CPU (no free memory to size by): the CPU's 256, and 4 x batch_size per metric call
    cpu = model_sizes(16, "auto", None, probe)
    assert cpu == Sizes(16, CPU_MAX_BATCH) and cpu.eval_batch == 64
    # auto on a GPU: half of 10 GiB at 1.25 MiB per row with gradients -> 4096; 0.3125 MiB without -> 16384 (MOST)
    one = model_sizes(64, "auto", 10 * gib, probe)
    assert (one.max_batch, one.eval_batch, one.batch_size) == (4096, MOST, 1024)
    assert one.budget == 5 * gib and one.row_bytes == (MIB, MIB // 4)
    # four workers on the device share it: a quarter each
    four = model_sizes(64, "auto", 10 * gib, probe, workers=4)
    assert (four.max_batch, four.eval_batch, four.batch_size) == (1024, 4096, 256)
    # never below the CPU's sizes, whole multiples of 256 (1365 fit: 1280), and the suite's batch size when larger
    assert model_sizes(64, "auto", gib, lambda: (100 * MIB, 100 * MIB)).max_batch == LEAST
    odd = model_sizes(2000, "auto", 10 * gib, lambda: (3 * MIB, MIB))
    assert int(5 * 1024 / (HEADROOM * 3)) == 1365 and odd.max_batch == 1280 and odd.batch_size == 2000
    assert odd.eval_batch == 4096  # 5 GiB / 1.25 MiB
    # a model the probe cannot measure (a text model): the CPU's sizes
    assert model_sizes(64, "auto", 10 * gib, lambda: None) == Sizes(64, CPU_MAX_BATCH)


def test_a_grid_is_probed_at_its_size_or_charged_its_area():
    """A conv net takes a 3 x 3 grid: probed on it (its activations grow with the area); the metrics' own inputs at
    their own size. A net with a fixed-size linear head cannot take the grid: probed at its own size and charged 9x."""
    model = argparse.Namespace(modality="image", encode=lambda x: x)
    conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    image = torch.rand(1, 1, 8, 8)
    native, grid = image_probe(conv, model, image, (1, 1))(), image_probe(conv, model, image, (3, 3))()
    assert grid == (9 * native[0], 9 * native[1])
    assert image_probe(conv, model, image, (3, 1))() == (9 * native[0], native[1])  # grids explained, images scored
    fixed = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    assert image_probe(fixed, model, image, (3, 3))() == tuple(
        9 * b for b in image_probe(fixed, model, image, (1, 1))()
    )
    text = argparse.Namespace(modality="text", encode=lambda x: x)
    assert image_probe(conv, text, image, (1, 1))() is None and image_probe(None, model, image, (1, 1))() is None


def test_the_vision_plan_gives_cnns_whole_grids_and_vits_windows():
    steps = plan(load_suite("vision"))
    assert input_scale(steps, stand_in("bcos_cnn_mnist")) == (3, 1)  # 3 x 3 grids explained in one pass; images scored
    assert input_scale(steps, stand_in("bcos_vit_mnist")) == (1, 1)  # windows of one cell


def test_max_batch_takes_auto_or_a_number():
    suite = load_suite("smoke")
    assert suite.max_batch == "auto"
    assert with_overrides(suite, max_batch=512).max_batch == 512
    for bad in ("big", 0, 2.5, True):
        with pytest.raises(UserError, match="max_batch"):
            with_overrides(suite, max_batch=bad)
    assert max_batch_arg("auto") == "auto" and max_batch_arg("1024") == 1024
    with pytest.raises(argparse.ArgumentTypeError, match="auto or a number"):
        max_batch_arg("lots")


def test_integrated_gradients_passes_follow_the_calls():
    from faithbench.attributions import get_method
    from faithbench.errors import ParameterError

    ig = get_method("integrated_gradients")
    assert ig.params["internal_batch_size"] == "auto"
    assert (ig.pass_rows(256), ig.pass_rows(100), ig.pass_rows(4096)) == (64, 64, 4096)  # the CPU's 64; a GPU's calls
    assert get_method("integrated_gradients", internal_batch_size=32).pass_rows(4096) == 32
    for bad in ("many", 0, 1.5):
        with pytest.raises(ParameterError, match="internal_batch_size"):
            get_method("integrated_gradients", internal_batch_size=bad)


def _run(out, free: int | None) -> pd.DataFrame:
    """The estimate suite's rows, run on the CPU; ``free``: a GPU's free memory stood in (None: the CPU's sizes)."""
    patch, threads = pytest.MonkeyPatch(), torch.get_num_threads()
    if free is not None:
        patch.setattr(work, "free_bytes", lambda device: free)
        patch.setattr(runner, "free_bytes", lambda device: free)
    torch.set_num_threads(1)  # 15 s; two threads on two busy cores take minutes (the counts are the same)
    try:
        return runner.run(build_suite(SUITE), out, device="cpu", progress=False)
    finally:
        torch.set_num_threads(threads)
        patch.undo()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The estimate suite run with the CPU's calls, and with a GPU's free memory stood in (ASSUMED_FREE_GIB, as a
    dry run for ``--device cuda`` on a machine without one assumes): its calls sized from memory, as on that GPU."""
    root = tmp_path_factory.mktemp("sized")
    return {"cpu": _run(root / "cpu", None), "gpu": _run(root / "gpu", int(ASSUMED_FREE_GIB * 2**30))}


def test_a_memory_sized_run_makes_the_calls_the_gpu_plan_counts(runs):
    suite = build_suite(SUITE)
    data = load_data(suite)
    models = {name: load_model(name) for name in SUITE["models"]}
    cost = estimate(plan(suite), models, len(data.labels), device="cuda", image=data.images[:1])
    sizes = dict(zip(cost.models["model"], cost.models["sizes"], strict=True))
    assert all(s.budget == int(ASSUMED_FREE_GIB * 2**30 * sizing.MEMORY_SHARE) for s in sizes.values())
    assert all(s.max_batch > CPU_MAX_BATCH and s.eval_batch >= s.max_batch for s in sizes.values())
    rows = runs["gpu"].drop_duplicates(["model", "method", "metric"])  # a metric's aggregates repeat its costs
    measured = rows.groupby(["model", "method"], sort=False)["model_calls"].sum()
    cpu = runs["cpu"].drop_duplicates(["model", "method", "metric"]).groupby(["model", "method"])["model_calls"].sum()
    shared = cost.models.set_index("model")["shared calls"]
    for (model, method), unit in cost.units.set_index(["model", "method"]).iterrows():
        if method == "native_normalised":
            continue  # the layers of a B-cosified Sequential count as calls (test_estimate)
        first = measured.loc[model].index[0] == method  # it pays the work the model's units share
        got = round(measured[(model, method)], 6) - (shared[model] if first else 0)
        if unit["notes"]:  # an estimate (LIME's segments): within the estimate test's tolerance
            assert abs(got - unit["model calls"]) <= TOLERANCE * unit["model calls"], (model, method)
        else:
            assert got == unit["model calls"], (model, method)
    assert measured.sum() < cpu.sum() / 2  # fewer, larger calls
    recorded = rows.groupby("model")["params"].agg(lambda p: {json.loads(x)["max_batch"] for x in p})
    assert recorded.to_dict() == {name: {s.max_batch} for name, s in sizes.items()}


def test_memory_sized_calls_give_the_same_scores(runs):
    """The same units scored with the CPU's calls and with a GPU's: the same values, to float rounding."""
    keys = ["model", "method", "metric", "aggregate"]
    both = runs["cpu"].merge(runs["gpu"], on=keys, suffixes=("_cpu", "_gpu"))
    assert len(both) == len(runs["cpu"]) == len(runs["gpu"])
    assert both["mean_cpu"].isna().equals(both["mean_gpu"].isna())
    close = torch.isclose(
        torch.tensor(both["mean_cpu"].fillna(0).to_numpy()),
        torch.tensor(both["mean_gpu"].fillna(0).to_numpy()),
        rtol=1e-4,
        atol=1e-5,
    )
    assert close.all(), both.loc[~close.numpy(), [*keys, "mean_cpu", "mean_gpu"]]


def test_smaller_inputs_take_more_rows_than_the_grid_the_calls_were_sized_for():
    """max_batch sized for 3 x 3 grids: a single image (a ninth of the area) takes 9x the rows; a grid its own; the
    CPU's sizes (sized_at 1) are the same for every input."""
    from faithbench.metrics.spec import Unit

    def unit(sized_at: int) -> Unit:
        return Unit(model=None, method=None, images=torch.empty(0), labels=torch.empty(0), sample_ids=torch.empty(0),
                    batch_size=16, device=torch.device("cpu"), max_batch=100, sized_at=sized_at)  # fmt: skip

    assert (unit(3).rows_at(1), unit(3).rows_at(3), unit(2).rows_at(1)) == (900, 100, 400)
    assert unit(1).rows_at(1) == unit(1).rows_at(3) == 100
