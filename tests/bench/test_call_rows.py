"""Where model calls start (``max_batch = "auto"``, :func:`faithbench.calls.call_rows`): the CPU's 256, a GPU's top of
the ladder, a number as given; a GPU plan's memory per input against a hand-counted network; and -- on the CPU, from a
GPU's top -- a run that makes exactly the calls the dry run plans for a GPU, with the same scores."""

import argparse
import json

import pandas as pd
import pytest
import torch
from torch import nn

from faithbench.bench.cli.parser import max_batch_arg
from faithbench.bench.estimate.counts import estimate, input_bytes
from faithbench.bench.run import runner
from faithbench.bench.run.data import load_data
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.suite import build_suite, load_suite, with_overrides
from faithbench.calls import CPU_ROWS, GPU_ROWS, call_rows
from faithbench.errors import UserError
from faithbench.models import load_model
from tests.bench.test_estimate import SUITE, TOLERANCE


def test_calls_start_at_the_cpus_256_a_gpus_top_or_the_number_given():
    assert call_rows("auto", "cpu") == CPU_ROWS == 256
    assert call_rows("auto", torch.device("cuda")) == GPU_ROWS == 16384
    assert call_rows(512, "cpu") == call_rows(512, "cuda") == 512


def test_the_memory_per_input_counts_a_hand_counted_network():
    """Linear(10, 20) -> ReLU -> Linear(20, 5) in float32. With gradients autograd keeps, per row, the first layer's
    input (10 floats) and the ReLU's output (20 floats, which the second layer keeps too: one storage): 120 bytes; the
    weights are kept once whatever the rows."""
    net = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    model = argparse.Namespace(encode=lambda x: x)
    assert input_bytes(net, model, torch.rand(1, 10)) == 120


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


def _run(out, rows: int | None) -> pd.DataFrame:
    """The estimate suite's rows, run on the CPU; ``rows``: its calls from there (a GPU's top: ``GPU_ROWS``; None: the
    CPU's)."""
    threads, suite = torch.get_num_threads(), build_suite(SUITE)
    torch.set_num_threads(1)  # 15 s; two threads on two busy cores take minutes (the counts are the same)
    try:
        return runner.run(suite if rows is None else with_overrides(suite, max_batch=rows), out, device="cpu",
                          progress=False)  # fmt: skip
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """The estimate suite run with the CPU's calls, and from a GPU's top of the ladder (nothing here runs out of
    memory: the calls a GPU with room makes)."""
    root = tmp_path_factory.mktemp("rows")
    return {"cpu": _run(root / "cpu", None), "gpu": _run(root / "gpu", GPU_ROWS)}


def test_a_run_from_the_gpus_top_makes_the_calls_the_gpu_plan_counts(runs):
    suite = build_suite(SUITE)
    data = load_data(suite)
    models = {name: load_model(name) for name in SUITE["models"]}
    cost = estimate(resolve(suite), models, len(data.labels), device="cuda", image=data.images[:1])
    assert cost.models["input bytes"].notna().all()  # a GPU plan states each image model's memory per input
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
    assert measured.sum() < cpu.sum()  # fewer, larger calls
    recorded = rows.groupby("model")["params"].agg(lambda p: {json.loads(x)["max_batch"] for x in p})
    assert recorded.to_dict() == {name: {GPU_ROWS} for name in SUITE["models"]}


def test_a_gpus_call_sizes_give_the_same_scores(runs):
    """The same units scored with the CPU's calls and from a GPU's top: the same values, to float rounding."""
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
