"""CUDA agrees with the CPU: every method's maps and every metric's scores (skipped without a GPU).

Stated tolerances (full fp32 on both devices; the runner turns TF32 off):
- maps: |cuda - cpu| <= 1e-4 * max|cpu| + 1e-3 * |cpu| per pixel. LIME and Shapley draw their
  perturbations on the host (Captum), so their maps are held to the same bound.
- scores: the whole smoke-sized suite on both devices, `compare --two-sided` at 1 % of the CPU score
  (at least 0.05 in the metric's unit): rankings of near-equal attributions may break ties differently.
"""

import subprocess
import sys

import pytest
import torch

from faithbench.attributions import METHODS, UnsupportedMethodError, get_method
from faithbench.models import load_model
from faithbench.models.data.mnist import mnist_splits

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

FAST = {
    "lime": {"n_samples": 30, "segmentation": "slic"},
    "shapley_sampling": {"n_samples": 1},
    "integrated_gradients": {"n_steps": 8},
}


@pytest.fixture(autouse=True)
def full_fp32():
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("model_name", ["cnn_mnist", "bcos_cnn_mnist", "vit_mnist", "aloe_vit_mnist"])
@pytest.mark.parametrize("method_name", [m for m in METHODS if not METHODS.get(m).capabilities.ground_truth])
def test_maps_on_cuda_match_the_cpu(model_name, method_name):
    test = mnist_splits()[1]
    images, labels = test.images[:4], test.labels[:4]
    method = get_method(method_name, **FAST.get(method_name, {}))
    cpu_model = load_model(model_name, device="cpu")
    try:
        method.check(cpu_model)
    except UnsupportedMethodError:
        pytest.skip(f"{method_name} does not explain {model_name}")
    cpu = method.attribute(cpu_model, cpu_model.encode(images), labels)
    gpu_model = load_model(model_name, device="cuda")
    x = gpu_model.encode(images.cuda())
    gpu = method.attribute(gpu_model, x, labels.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-4 * cpu.abs().max().item(), rtol=1e-3)


def test_every_metric_scores_the_same_on_cuda(tmp_path):
    run = [sys.executable, "-m", "bench", "run", "--suite", "smoke", "--no-progress", "--no-report"]
    for device in ("cpu", "cuda"):
        subprocess.run([*run, "--device", device, "--out", str(tmp_path / device)], check=True)
    files = [str(tmp_path / device / "results.csv") for device in ("cpu", "cuda")]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "compare", *files, "--two-sided", "--tolerance", "0.05"]
        + ["--rel-tolerance", "0.01"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "model_name", ["cnn_mnist", "bcos_cnn_mnist", "bcosified_cnn_mnist", "vit_mnist", "aloe_vit_mnist"]
)
def test_the_memory_per_input_bounds_what_cuda_allocates(model_name):
    """A GPU plan's memory per input (bench.estimate.counts.input_bytes: what autograd keeps) against the CUDA
    allocator:
    a forward and backward of 3 x 3 grids (a ViT: 28 px) on 512 rows allocates at most 1.25 times its bytes per row
    (beyond its one-row cost; the backward's own buffers), and a forward without gradients no more than that."""
    from faithbench.bench.estimate.counts import input_bytes

    model = load_model(model_name, device="cuda")
    side = 28 if model.is_vit else 84
    image = torch.rand(1, 1, side, side, device="cuda")
    one = model.encode(image)
    grad = input_bytes(model.module, model, image)

    def extra(n: int, gradients: bool) -> int:
        x = one.expand(n, *one.shape[1:]).contiguous().requires_grad_(gradients)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.set_grad_enabled(gradients):
            out = model.module(x)
            if gradients:
                torch.autograd.grad(out[:, 0].sum(), x)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    used = extra(512, True) - extra(1, True)
    assert 0.5 * grad * 511 <= used <= 1.25 * grad * 511, (model_name, used / 511, grad)  # not a wild estimate
    assert extra(512, False) - extra(1, False) <= 1.25 * grad * 511, model_name
