import os

import torch
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=400, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of pytest -n's workers: one thread each (and in their subprocesses)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject's addopts): a worker per core, at most 4 (each holds torch and a model zoo in memory);
    none when benchmarks are timed (pytest-benchmark times only in-process)."""
    if config.getoption("benchmark_enable", False):
        return 0
    return max(1, min(4, os.cpu_count() or 1))
