"""Metric speed at realistic sizes (pytest-benchmark). Skipped by default; run with

    python -m pytest tests/benchmarks --benchmark-enable --benchmark-only

Set FAITHBENCH_BENCH_DEVICE=cuda to time on a GPU. Quantus 0.6.0 rows give the peer baseline
(CPU, NumPy) for the same quantity where its definition coincides.
"""

import os

import numpy as np
import pytest
import torch
from torch import nn

from faithbench.metrics import (
    comprehensiveness_sufficiency,
    explanation_entropy,
    gini_index,
    grid_pointing_game,
    pixel_deletion,
    pixel_insertion,
    sequence_pointing_game,
    sliding_window_maps,
)
from faithbench.metrics._perturb import feature_ranks
from faithbench.metrics.imputation import noisy_linear_imputation
from faithbench.metrics.road import ROAD_FRACTIONS, road

DEVICE = torch.device(os.environ.get("FAITHBENCH_BENCH_DEVICE", "cpu"))
GEN = torch.Generator().manual_seed(0)
SIXTEEN_STEPS = [i / 16 for i in range(17)]


def sync(fn):
    def run():
        out = fn()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        return out

    return run


def cnn(in_channels: int = 3, classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return (
        nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, classes),
        )
        .eval()
        .to(DEVICE)
    )


@pytest.fixture(scope="module")
def maps_224():
    return torch.randn(64, 224, 224, generator=GEN).to(DEVICE)


@pytest.mark.benchmark(group="gridpg")
def test_gridpg_64_maps_2x2_224px(benchmark, maps_224):
    a = maps_224.view(16, 4, 224, 224)
    benchmark(sync(lambda: grid_pointing_game(a, 2, smooth=7)))


@pytest.mark.benchmark(group="gridpg")
def test_gridpg_paper_scale_3x3_672px_smooth15(benchmark):
    a = torch.randn(4, 9, 672, 672, generator=GEN).to(DEVICE)
    benchmark(sync(lambda: grid_pointing_game(a, 3, smooth=15)))


@pytest.mark.benchmark(group="gridpg")
def test_gridpg_vit_windows_aloe_geometry(benchmark):
    grids = torch.rand(4, 6, 448, 448, generator=GEN).to(DEVICE)
    targets = torch.zeros(4, 4, dtype=torch.long, device=DEVICE)
    benchmark(
        sync(
            lambda: sliding_window_maps(
                lambda x, t: x.sum(1),
                grids,
                targets,
                window=224,
                stride=112,
                padding=0,
                fold="mean",
                chunk_size=64,
            )
        )
    )


@pytest.mark.benchmark(group="complexity")
def test_entropy_64_maps_224px(benchmark, maps_224):
    benchmark(sync(lambda: explanation_entropy(maps_224)))


@pytest.mark.benchmark(group="complexity")
def test_gini_64_maps_224px(benchmark, maps_224):
    benchmark(sync(lambda: gini_index(maps_224)))


@pytest.mark.benchmark(group="complexity")
def test_quantus_complexity_64_maps_224px_baseline(benchmark, maps_224):
    quantus = pytest.importorskip("quantus")
    a = maps_224.cpu().numpy()[:, None]
    metric = quantus.Complexity(abs=True, normalise=False, disable_warnings=True)
    kwargs = dict(
        model=cnn(1).cpu(),
        x_batch=a.copy(),
        y_batch=np.zeros(64, dtype=int),
        a_batch=a,
        channel_first=True,
        device="cpu",
    )
    benchmark(lambda: metric(**kwargs))


def classified_images(n: int, channels: int, side: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` random images (n, channels, side, side), maps (n, side, side) and targets of 10 classes, on DEVICE."""
    x = torch.rand(n, channels, side, side, generator=GEN).to(DEVICE)
    a = torch.randn(n, side, side, generator=GEN).to(DEVICE)
    t = torch.randint(0, 10, (n,), generator=GEN).to(DEVICE)
    return x, a, t


@pytest.fixture(scope="module")
def images_64():
    return classified_images(32, 3, 64)


@pytest.mark.benchmark(group="deletion")
def test_pixel_deletion_16_steps_small_cnn(benchmark, images_64):
    x, a, t = images_64
    model = cnn()
    benchmark(sync(lambda: pixel_deletion(model, x, a, t, block_size=4, fractions=SIXTEEN_STEPS)))


@pytest.mark.benchmark(group="deletion")
def test_pixel_insertion_16_steps_small_cnn(benchmark, images_64):
    x, a, t = images_64
    model = cnn()
    benchmark(sync(lambda: pixel_insertion(model, x, a, t, block_size=4, fractions=SIXTEEN_STEPS)))


@pytest.mark.benchmark(group="deletion")
def test_quantus_region_perturbation_16_steps_baseline(benchmark, images_64):
    quantus = pytest.importorskip("quantus")
    x, a, t = (v.cpu() for v in images_64)
    model = cnn().cpu()
    metric = quantus.RegionPerturbation(
        patch_size=16, regions_evaluation=16, perturb_baseline=0.0, normalise=False, disable_warnings=True
    )
    kwargs = dict(
        model=model,
        x_batch=x.numpy(),
        y_batch=t.numpy(),
        a_batch=a[:, None].expand(-1, 3, -1, -1).contiguous().numpy(),
        channel_first=True,
        device="cpu",
        softmax=True,
    )
    benchmark(lambda: metric(**kwargs))


@pytest.mark.benchmark(group="deletion")
def test_pixel_deletion_16_blocks_of_16px_like_quantus(benchmark, images_64):
    x, a, t = images_64
    model = cnn()
    benchmark(sync(lambda: pixel_deletion(model, x, a, t, block_size=16, fractions=SIXTEEN_STEPS)))


ROAD_THREE = [0.1, 0.5, 0.9]  # the suites' three of the authors' seven fractions


@pytest.fixture(scope="module")
def images_224_gray():
    return classified_images(8, 1, 224)


@pytest.mark.benchmark(group="road")
def test_road_imputation_56_rgb_images_224px(benchmark):
    images = torch.rand(56, 3, 224, 224, generator=GEN).to(DEVICE)  # 8 images x the authors' 7 fractions
    ranks = feature_ranks(torch.randn(8, 224 * 224, generator=GEN)).view(8, 224, 224)
    removed = torch.cat([ranks < int(f * 224 * 224) for f in ROAD_FRACTIONS]).to(DEVICE)  # as road removes them
    benchmark(sync(lambda: noisy_linear_imputation(images, removed)))


@pytest.mark.benchmark(group="road")
def test_road_8_images_3_fractions_224px_small_cnn(benchmark, images_224_gray):
    x, a, t = images_224_gray
    model = cnn(1)
    benchmark(sync(lambda: road(model, x, a, t, fractions=ROAD_THREE)))


@pytest.mark.benchmark(group="road")
def test_quantus_road_8_images_3_fractions_224px_baseline(benchmark, images_224_gray):
    quantus = pytest.importorskip("quantus")
    x, a, t = (v.cpu() for v in images_224_gray)
    metric = quantus.ROAD(percentages=[int(f * 100) for f in ROAD_THREE], abs=False, normalise=False,
                          disable_warnings=True)  # fmt: skip
    kwargs = dict(
        model=cnn(1).cpu(),
        x_batch=x.numpy(),
        y_batch=t.numpy(),
        a_batch=a[:, None].numpy(),
        channel_first=True,
        device="cpu",
        batch_size=8,
    )
    benchmark.pedantic(lambda: metric(**kwargs), rounds=2, iterations=1)  # SciPy's direct solve per image: slow


class BagOfEmbeddings(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 64, classes: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, attention_mask):
        h = (self.emb(ids) * attention_mask.unsqueeze(-1)).sum(1) / attention_mask.sum(1, keepdim=True)
        return self.head(h)


@pytest.mark.benchmark(group="erasure")
@pytest.mark.parametrize("summary", ["eraser", "bcos-lm"])
def test_comprehensiveness_sufficiency_64_sequences_128_tokens(benchmark, summary):
    model = BagOfEmbeddings().eval().to(DEVICE)
    ids = torch.randint(1, 1000, (64, 128), generator=GEN).to(DEVICE)
    attr = torch.randn(64, 128, generator=GEN).to(DEVICE)
    mask = torch.ones(64, 128, device=DEVICE)
    benchmark(
        sync(
            lambda: comprehensiveness_sufficiency(
                model, ids, attr, summary=summary, baseline=0, extra={"attention_mask": mask}, chunk_size=512
            )
        )
    )


@pytest.mark.benchmark(group="seqpg")
def test_seqpg_256_sequences_2x256_tokens(benchmark):
    attr = torch.randn(256, 514, generator=GEN).to(DEVICE)
    seg = torch.cat([torch.tensor([-1]), torch.arange(2).repeat_interleave(256), torch.tensor([-1])])
    seg = seg.expand(256, -1).to(DEVICE)
    target = torch.randint(0, 2, (256,), generator=GEN).to(DEVICE)
    benchmark(sync(lambda: sequence_pointing_game(attr, seg, target)))
