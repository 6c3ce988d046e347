"""The device of each worker under torchrun, for every mix of processes and GPUs."""

import pytest
import torch

from faithbench.bench.run.distributed import worker_device

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
