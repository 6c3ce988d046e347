"""The device of each worker under torchrun, for every mix of processes and GPUs, and how many share it."""

import pytest
import torch

from faithbench.bench.run.distributed import worker_device, workers_sharing

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize(
    ("requested", "local_rank", "n_gpus", "device"),
    [
        (CPU, 1, 0, "cpu"),
        (CPU, 1, 8, "cpu"),  # --device cpu on a GPU machine
        (CUDA, 0, 2, "cuda:0"),  # one GPU per process
        (CUDA, 1, 2, "cuda:1"),
        (CUDA, 1, 1, "cuda:0"),  # more processes than GPUs: they share
        (CUDA, 2, 2, "cuda:0"),
        (torch.device("cuda", 1), 0, 2, "cuda:1"),  # an explicit GPU is shared by all workers
    ],
)
def test_worker_device(requested, local_rank, n_gpus, device):
    assert worker_device(requested, local_rank=local_rank, n_gpus=n_gpus) == torch.device(device)


def test_cuda_without_a_gpu_is_an_error():
    with pytest.raises(RuntimeError, match="no GPU"):
        worker_device(CUDA, local_rank=0, n_gpus=0)


@pytest.mark.parametrize(
    ("requested", "local_rank", "local", "n_gpus", "sharing"),
    [
        (CPU, 0, 2, 0, 2),  # two local workers on the CPU
        (CUDA, 0, 4, 1, 4),  # --workers 4 on one GPU: a quarter of its memory each
        (CUDA, 0, 8, 8, 1),  # torchrun, a GPU per process
        (CUDA, 1, 5, 2, 2),  # five processes in turn on two GPUs: cuda:1 takes ranks 1 and 3
        (CUDA, 0, 5, 2, 3),  # ... cuda:0 takes ranks 0, 2 and 4
        (torch.device("cuda", 1), 0, 3, 2, 3),  # one GPU named for all
        (CUDA, 0, 1, 1, 1),
    ],
)
def test_workers_sharing_a_device(requested, local_rank, local, n_gpus, sharing):
    assert workers_sharing(requested, local_rank=local_rank, local=local, n_gpus=n_gpus) == sharing
