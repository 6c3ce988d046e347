"""Device and backend of each torchrun rank, for every mix of processes and GPUs."""

import pytest
import torch

from faithbench.bench.run.distributed import plan_distributed

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    ("requested", "local_rank", "local_world", "n_gpus", "backend", "device"),
    [
        (CPU, 1, 2, 0, "gloo", "cpu"),
        (CPU, 1, 2, 8, "gloo", "cpu"),  # --device cpu on a GPU machine
        (CUDA, 0, 2, 2, "nccl", "cuda:0"),  # one GPU per process
        (CUDA, 1, 2, 2, "nccl", "cuda:1"),
        (CUDA, 1, 2, 1, "gloo", "cuda:0"),  # more processes than GPUs: they share, NCCL cannot
        (CUDA, 2, 3, 2, "gloo", "cuda:0"),
        (torch.device("cuda", 1), 0, 2, 2, "gloo", "cuda:1"),  # an explicit GPU is shared by all ranks
    ],
)
def test_plan(requested, local_rank, local_world, n_gpus, backend, device):
    got = plan_distributed(requested, local_rank=local_rank, local_world=local_world, n_gpus=n_gpus)
    assert got == (backend, torch.device(device))
