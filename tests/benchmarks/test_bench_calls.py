"""The vision suite's model calls (issue 51's count, the same on every device): the dry run's
estimate at the CPU defaults, at fixed GPU-sized batches, and as a GPU's memory sizes them (``max_batch = "auto"`` on
``cuda``: an 80 GB H100 with one worker and with four, the H200's 139 GB with four). Before issue 51 the suite made
9,055 calls (381caf4). Skipped by default; run with

    python -m pytest tests/benchmarks/test_bench_calls.py --benchmark-enable --benchmark-only -s

The totals print and go into the benchmark's ``extra_info``; the time is the estimate's own.
"""

import pytest

from faithbench.bench.estimate.counts import estimate
from faithbench.bench.run import estimate as estimating
from faithbench.bench.run.data import load_data
from faithbench.bench.run.plan import plan
from faithbench.bench.run.suite import load_suite, with_overrides

SIZES = ((64, 256), (256, 2048), (2048, 8192))  # (batch_size, max_batch): the CPU defaults, then GPU-sized
GPUS = ((80.0, 1), (80.0, 4), (139.0, 4))  # (free GiB, workers on the device)
BEFORE = 9_055  # the vision suite's calls at 381caf4, before issue 51


@pytest.mark.parametrize("suite_name", ["vision"])
def test_bench_vision_model_calls(benchmark, suite_name):
    suite = load_suite(suite_name)
    n = len(load_data(suite).labels)

    def count(batch: int, cap: int) -> int:
        return estimate(plan(with_overrides(suite, batch_size=batch, max_batch=cap)), None, n).total()[1]

    benchmark.pedantic(count, args=SIZES[0], rounds=1, iterations=1)
    for batch, cap in SIZES:
        calls = count(batch, cap)
        benchmark.extra_info[f"calls_{batch}_{cap}"] = calls
        print(f"{suite_name} batch_size {batch}, max_batch {cap}: {calls} model calls")
    data = load_data(suite)
    for gib, workers in GPUS:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(estimating, "ASSUMED_FREE_GIB", gib)  # the GPU a CPU's dry run assumes
            calls = estimate(plan(suite), None, n, device="cuda", workers=workers, image=data.images[:1]).total()[1]
        benchmark.extra_info[f"calls_cuda_{gib:.0f}GiB_{workers}w"] = calls
        fewer = BEFORE / calls
        print(f"{suite_name} on cuda, {gib:.0f} GiB free, {workers} worker(s): {calls} calls ({fewer:.1f}x fewer)")
