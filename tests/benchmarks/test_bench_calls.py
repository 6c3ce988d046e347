"""The vision suite's model calls (issue 51's count, the same on every device): the dry run's
estimate at the CPU defaults, at fixed GPU-sized batches, and on ``cuda`` (``max_batch = "auto"``: calls from the top
of the ladder, the fewest a GPU's run can make whatever its memory; issue 66). Before issue 51 the suite made 9,055
calls (381caf4). Skipped by default; run with

    python -m pytest tests/benchmarks/test_bench_calls.py --benchmark-enable --benchmark-only -s

The totals print and go into the benchmark's ``extra_info``; the time is the estimate's own.
"""

import pytest

from faithbench.bench.estimate.counts import estimate
from faithbench.bench.run.data import load_data
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.suite import load_suite, with_overrides

SIZES = ((64, 256), (256, 2048), (2048, 8192))  # (batch_size, max_batch): the CPU defaults, then GPU-sized
BEFORE = 9_055  # the vision suite's calls at 381caf4, before issue 51


@pytest.mark.parametrize("suite_name", ["vision"])
def test_bench_vision_model_calls(benchmark, suite_name):
    suite = load_suite(suite_name)
    n = len(load_data(suite).labels)

    def count(batch: int, cap: int) -> int:
        return estimate(resolve(with_overrides(suite, batch_size=batch, max_batch=cap)), None, n).total()[1]

    benchmark.pedantic(count, args=SIZES[0], rounds=1, iterations=1)
    for batch, cap in SIZES:
        calls = count(batch, cap)
        benchmark.extra_info[f"calls_{batch}_{cap}"] = calls
        print(f"{suite_name} batch_size {batch}, max_batch {cap}: {calls} model calls")
    data = load_data(suite)
    calls = estimate(resolve(suite), None, n, device="cuda", image=data.images[:1]).total()[1]
    benchmark.extra_info["calls_cuda"] = calls
    print(f"{suite_name} on cuda: {calls} calls ({BEFORE / calls:.1f}x fewer)")
