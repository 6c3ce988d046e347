"""The vision suite's model calls, pooled and not (issue 51's count, the same on every device): the dry run's
estimate at the CPU defaults and at GPU-sized batches. Skipped by default; run with

    python -m pytest tests/benchmarks/test_bench_calls.py --benchmark-enable --benchmark-only -s

The totals print and go into the benchmark's ``extra_info``; the time is the estimate's own.
"""

import pytest

from faithbench.bench.run.data import load_data
from faithbench.bench.run.estimate import estimate
from faithbench.bench.run.plan import plan
from faithbench.bench.run.suite import load_suite, with_overrides

SIZES = ((64, 256), (256, 2048), (2048, 8192))  # (batch_size, max_batch): the CPU defaults, then GPU-sized


@pytest.mark.parametrize("suite_name", ["vision"])
def test_bench_vision_model_calls(benchmark, suite_name):
    suite = load_suite(suite_name)
    n = len(load_data(suite).labels)

    def count(batch: int, cap: int, pooled: bool) -> int:
        return estimate(
            plan(with_overrides(suite, batch_size=batch, max_batch=cap, pool_calls=pooled)), None, n
        ).total()[1]

    benchmark.pedantic(count, args=(*SIZES[0], True), rounds=1, iterations=1)
    for batch, cap in SIZES:
        alone, pooled = count(batch, cap, False), count(batch, cap, True)
        benchmark.extra_info[f"calls_{batch}_{cap}"] = {"unpooled": alone, "pooled": pooled}
        print(f"{suite_name} batch_size {batch}, max_batch {cap}: {alone} model calls unpooled, {pooled} pooled")
        assert pooled <= alone
