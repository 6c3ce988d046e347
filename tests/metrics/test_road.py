"""ROAD's noisy linear imputation (exact cases, convergence, noise) and the ROAD metric, against Quantus 0.6.0."""

import numpy as np
import pytest
import torch
from torch import nn

from faithbench.attributions import get_method
from faithbench.config import from_table
from faithbench.errors import UserError
from faithbench.metrics import imputation
from faithbench.metrics.imputation import (
    ROAD_TOL,
    STREAM_ROAD,
    cpu_group,
    hashed_normal,
    linear_imputation,
    noisy_linear_imputation,
)
from faithbench.metrics.road import QUANTUS_FRACTIONS, ROAD_FRACTIONS, SPEC, RoadConfig, road
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import bcos_inverse, normalized
from tests.helpers import small_cnn

GEN = torch.Generator().manual_seed(31)


def blob(side: int, frac: float, batch: int = 1) -> torch.Tensor:
    """(batch, side, side) bool: the frac * side^2 pixels nearest an off-centre point (one large hole)."""
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    dist = (yy - 0.3 * side) ** 2 + (xx - 0.6 * side) ** 2 + 1e-3 * xx  # no ties
    rank = dist.flatten().argsort().argsort().view(side, side)
    return (rank < frac * side * side).expand(batch, side, side).clone()


def smooth_images(b: int, c: int, side: int) -> torch.Tensor:
    return nn.functional.avg_pool2d(torch.rand(b, c, side, side, generator=GEN), 3, 1, 1)


# --------------------------------------------------------------------------- the imputer


@pytest.mark.parametrize("side", [7, 16])
def test_a_linear_ramp_is_reproduced_exactly_inside_the_border(side):
    yy, xx = torch.meshgrid(torch.arange(side).double(), torch.arange(side).double(), indexing="ij")
    ramp = (0.1 + 0.03 * yy + 0.02 * xx).view(1, 1, side, side) / (0.1 + 0.05 * side)
    images = torch.cat([ramp, 1 - ramp], dim=1).expand(3, 2, side, side)
    removed = torch.rand(3, side, side, generator=GEN) < torch.tensor([0.3, 0.7, 1.0]).view(3, 1, 1)
    removed[:, [0, -1], :] = False  # the border ring kept: inside, the 8-neighbour mean of a ramp is the ramp
    removed[:, :, [0, -1]] = False
    out, its, error = linear_imputation(images, removed, tol=1e-13, dtype=torch.float64)  # exact up to tol
    torch.testing.assert_close(out, images, atol=1e-11, rtol=0)
    assert error <= 1e-13 and its < 40
    out, its, error = linear_imputation(images, removed)  # float32, tol 1e-5
    torch.testing.assert_close(out, images, atol=1e-5, rtol=0)
    assert error <= ROAD_TOL and its < 15


def test_a_constant_image_is_reproduced_whatever_is_removed_border_included():
    images = torch.full((2, 3, 9, 9), 0.3)
    removed = torch.rand(2, 9, 9, generator=GEN) < 0.8
    out, _, _ = linear_imputation(images, removed)
    torch.testing.assert_close(out, images)


def test_kept_pixels_never_change_and_noise_only_touches_removed_ones():
    images = torch.rand(4, 3, 10, 10, generator=GEN)
    removed = torch.rand(4, 10, 10, generator=GEN) < 0.5
    plain, _, _ = linear_imputation(images, removed)
    noisy = noisy_linear_imputation(images, removed, noise=0.05, seed=3)
    keep = ~removed.unsqueeze(1).expand_as(images)
    assert torch.equal(plain[keep], images[keep]) and torch.equal(noisy[keep], images[keep])
    assert not torch.equal(noisy[~keep], plain[~keep])


def test_the_solver_converges_on_a_large_hole_and_warns_when_capped():
    images = smooth_images(2, 1, 48)
    removed = blob(48, 0.95, 2)
    exact, its, error = linear_imputation(images.double(), removed, tol=1e-12, dtype=torch.float64)
    assert error <= 1e-12 and its < 40
    out, its, error = linear_imputation(images, removed)  # float32, tol 1e-5: the error estimate is close
    assert error <= ROAD_TOL and its < 20 and (out.double() - exact).abs().max() < 2 * ROAD_TOL
    with pytest.warns(RuntimeWarning, match="max_iter=2 CG iterations"):
        _, its, error = linear_imputation(images, removed, max_iter=2)
    assert its == 2 and error > ROAD_TOL


def test_cpu_groups_solve_each_image_to_tol_and_warn_once(monkeypatch):
    """On the CPU the images are solved in cache-sized groups: each image is within tol of its exact imputation
    whatever the group, a group of one gives what one image alone gives, and a capped solve warns once."""
    images, removed = smooth_images(5, 3, 40), torch.stack([blob(40, f, 1)[0] for f in (0.1, 0.3, 0.5, 0.7, 0.9)])
    exact, _, _ = linear_imputation(images.double(), removed, tol=1e-12, max_iter=3000, dtype=torch.float64)
    whole, _, _ = linear_imputation(images, removed)
    assert cpu_group(3 * 40 * 40, torch.float32) >= 5  # 19 KB an image: one group
    monkeypatch.setattr(imputation, "CPU_GROUP_BYTES", 3 * 40 * 40 * 4 * 2)  # two images a group
    assert cpu_group(3 * 40 * 40, torch.float32) == 2
    grouped, _, error = linear_imputation(images, removed)
    assert error <= ROAD_TOL
    for out in (whole, grouped):
        assert (out.double() - exact).abs().max() < 2 * ROAD_TOL
    alone = linear_imputation(images[4:], removed[4:])[0]  # the last group holds the fifth image alone
    torch.testing.assert_close(grouped[4:], alone, rtol=0, atol=0)
    with pytest.warns(RuntimeWarning, match="max_iter=1 CG iterations") as record:
        linear_imputation(images, removed, max_iter=1)
    assert len([w for w in record if "max_iter" in str(w.message)]) == 1


@pytest.mark.parametrize("kept", ["corner block", "one pixel", "centre block"])
def test_float32_imputation_is_refined_to_tol_on_ill_conditioned_masks(kept):
    """A few kept pixels bunched together: float32 CG alone stalls at a true error of 1e-3..1e-2 while its recursive
    residual says tol (review of 2026-11-26); the float64 residual correction brings it back."""
    side = 96
    images = smooth_images(1, 3, side)
    removed = torch.ones(1, side, side, dtype=torch.bool)
    {"corner block": lambda: removed[:, :10, :10].fill_(False), "one pixel": lambda: removed[:, 3, 5].fill_(False),
     "centre block": lambda: removed[:, 40:50, 40:50].fill_(False)}[kept]()  # fmt: skip
    exact, _, _ = linear_imputation(images.double(), removed, tol=1e-11, max_iter=3000, dtype=torch.float64)
    out, _, error = linear_imputation(images, removed)
    assert error <= ROAD_TOL and (out.double() - exact).abs().max() < 3 * ROAD_TOL


def test_an_image_with_every_pixel_removed_takes_the_fallback_colour():
    images = torch.rand(2, 3, 5, 5, generator=GEN)
    removed = torch.ones(2, 5, 5, dtype=torch.bool)
    removed[1, 2, 2] = False  # one kept pixel: the whole image becomes its colour
    out, _, _ = linear_imputation(images, removed, fallback=torch.tensor([0.1, 0.2, 0.3]))
    torch.testing.assert_close(out[0], torch.tensor([0.1, 0.2, 0.3]).view(3, 1, 1).expand(3, 5, 5))
    torch.testing.assert_close(out[1], images[1, :, 2, 2].view(3, 1, 1).expand(3, 5, 5))


def test_noise_is_gaussian_with_the_asked_sigma_and_keyed_by_sample_id_not_by_batch():
    images = torch.rand(3, 3, 32, 32, generator=GEN)
    removed = torch.rand(3, 32, 32, generator=GEN) < 0.5
    plain, _, _ = linear_imputation(images, removed)
    noisy = noisy_linear_imputation(images, removed, noise=0.01, seed=1, ids=torch.tensor([7, 8, 9]))
    eps = (noisy - plain)[removed.unsqueeze(1).expand_as(images)] / 0.01
    assert abs(float(eps.mean())) < 0.05 and abs(float(eps.std()) - 1) < 0.05
    alone = noisy_linear_imputation(images[1:2], removed[1:2], noise=0.01, seed=1, ids=torch.tensor([8]))
    torch.testing.assert_close(alone, noisy[1:2])
    other_seed = noisy_linear_imputation(images[1:2], removed[1:2], noise=0.01, seed=2, ids=torch.tensor([8]))
    assert not torch.equal(other_seed, alone)
    z = hashed_normal(torch.arange(4), (5000,), seed=0, stream=STREAM_ROAD)
    assert abs(float(z.mean())) < 0.03 and abs(float(z.std()) - 1) < 0.03
    assert float(torch.corrcoef(z[:2])[0, 1]).__abs__() < 0.05


def test_imputation_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"removed \(B, H, W\) bool"):
        linear_imputation(torch.rand(1, 1, 4, 4), torch.zeros(1, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="max_iter a positive integer"):
        linear_imputation(torch.rand(1, 1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.bool), max_iter=0)
    with pytest.raises(ValueError, match="noise must be a standard deviation"):
        noisy_linear_imputation(torch.rand(1, 1, 4, 4), torch.zeros(1, 4, 4, dtype=torch.bool), noise=-1)


# --------------------------------------------------------------------------- against Quantus 0.6.0

quantus = pytest.importorskip("quantus")


def quantus_imputation(images: torch.Tensor, removed: torch.Tensor) -> torch.Tensor:
    from quantus.functions.perturb_func import noisy_linear_imputation as theirs

    out = [
        theirs(img.double().numpy(), np.flatnonzero(rem.numpy().ravel()), noise=0.0)
        for img, rem in zip(images, removed, strict=True)
    ]
    return torch.tensor(np.stack(out))


@pytest.mark.parametrize(
    ("channels", "side", "mask"),
    [(1, 12, "random"), (1, 24, "blob"), (1, 33, "random"), (3, 20, "blob"), (1, 64, "blob")],
)
def test_noise_free_imputation_equals_quantus_noisy_linear_imputer(channels, side, mask):
    images = smooth_images(3, channels, side)
    if mask == "random":
        removed = torch.rand(3, side, side, generator=GEN) < torch.tensor([0.2, 0.6, 0.95]).view(3, 1, 1)
    else:
        removed = blob(side, 0.9, 3)
    ours, _, _ = linear_imputation(images, removed)
    theirs = quantus_imputation(images, removed)
    assert (ours.double() - theirs).abs().max() < 3e-5  # float32, tol 1e-5: measured 7.6e-6 .. 1.2e-5


class Recorder(nn.Module):
    """A 1-channel linear classifier (4 classes) that keeps every input it sees."""

    def __init__(self, side: int) -> None:
        super().__init__()
        torch.manual_seed(11)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(side * side, 4))
        self.seen: list[torch.Tensor] = []
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        return self.net(x)


def test_a_noise_free_road_curve_equals_quantus_road_on_one_channel():
    side, b = 10, 8
    percentages = [1, 9, 29, 50, 71, 99]  # 29 % of 100 pixels: 0.29 * 100 = 28.999.. must still remove 29
    model = Recorder(side)
    images = smooth_images(b, 1, side)
    maps = torch.randn(b, side, side, generator=GEN)
    with torch.no_grad():
        targets = model(images).argmax(1)
    model.seen.clear()
    metric = quantus.ROAD(percentages=percentages, noise=0.0, abs=False, normalise=False, disable_warnings=True)
    theirs = metric(
        model=model,
        x_batch=images.numpy(),
        y_batch=targets.numpy(),
        a_batch=maps.unsqueeze(1).numpy(),
        channel_first=True,
        device="cpu",
        batch_size=b,
    )
    their_inputs = torch.stack([x for x in model.seen if len(x) == b], dim=1)  # (B, R, 1, H, W)
    model.seen.clear()
    ours = road(model, images, maps, targets, fractions=[p / 100 for p in percentages], noise=0.0, chunk_size=b)
    our_inputs = torch.cat(model.seen).view(b, len(percentages), 1, side, side)
    removed = (our_inputs != images.unsqueeze(1)).flatten(2).sum(2)
    assert removed.tolist() == [percentages] * b  # floor(f H W) pixels, as Quantus' int(H W p / 100)
    diff = (our_inputs.double() - their_inputs.double()).abs().max()
    assert diff < 3e-5, diff  # float32 imputation, tol 1e-5: measured 1.4e-5
    assert ours.curve.mean(dim=0).tolist() == pytest.approx([theirs[p] for p in percentages])
    assert 0 < float(ours.curve.mean()) < 1  # the curve is not trivial: some predictions flip, some do not


def test_road_runs_on_rgb_and_every_encoding_sees_the_same_imputed_image():
    images = torch.rand(2, 3, 8, 8, generator=GEN)
    maps = torch.randn(2, 3, 8, 8, generator=GEN)
    decoded = []
    for enc in (normalized((0.4, 0.5, 0.6), (0.2, 0.25, 0.3)), bcos_inverse(3)):
        seen = []

        def forward(x, enc=enc, seen=seen):
            seen.append(enc.decode(x))
            return torch.zeros(len(x), 3)

        res = road(forward, images, maps, torch.tensor([0, 1]), encode=enc, noise=0.01, seed=4)
        decoded.append(torch.cat(seen))
        assert res.curve.shape == (2, len(ROAD_FRACTIONS))
    torch.testing.assert_close(decoded[0], decoded[1], atol=1e-5, rtol=0)


def test_road_readouts_and_fraction_counts():
    model = small_cnn(in_channels=1, classes=4, seed=2)
    images = torch.rand(3, 1, 10, 10, generator=GEN)
    maps = torch.randn(3, 10, 10, generator=GEN)
    t = torch.tensor([0, 1, 2])
    acc = road(model, images, maps, t, fractions=QUANTUS_FRACTIONS)
    prob = road(model, images, maps, t, fractions=QUANTUS_FRACTIONS, readout="probability")
    assert set(acc.curve.unique().tolist()) <= {0.0, 1.0} and acc.curve.shape == (3, 50)
    assert ((prob.curve > 0) & (prob.curve < 1)).all()
    torch.testing.assert_close(acc.values, acc.curve.mean(1))
    with pytest.raises(ValueError, match="unknown readout 'logit'; valid choices: 'accuracy', 'probability'"):
        road(model, images, maps, t, readout="logit")
    with pytest.raises(ValueError, match=r"must lie in \(0, 1\]"):
        road(model, images, maps, t, fractions=[0.0, 0.5])


def test_the_road_metric_through_a_unit():
    model = ModelAdapter("cnn", "standard", small_cnn(classes=4), normalized((0.5,), (0.5,)), 4, (8, 8))
    images = torch.rand(5, 1, 8, 8, generator=GEN)
    unit = Unit(
        model=model,
        method=get_method("input_x_gradient"),
        images=images,
        labels=torch.tensor([0, 1, 2, 3, 0]),
        sample_ids=torch.arange(5),
        batch_size=2,
        device=torch.device("cpu"),
    )
    res = SPEC.evaluate(unit, RoadConfig())
    assert res.values.shape == (5,) and res.curve.shape == (5, 7) and res.params["noise"] == 0.01
    assert res.params["fractions"] == list(ROAD_FRACTIONS) and SPEC.table == "road" and not SPEC.higher_is_better
    again = SPEC.evaluate(unit, RoadConfig())
    torch.testing.assert_close(res.curve, again.curve)  # the noise is keyed, not drawn


def test_road_config_errors_name_the_key_and_the_choices():
    with pytest.raises(UserError, match="unknown readout 'auc'; valid choices: 'accuracy', 'probability'"):
        from_table(RoadConfig, {"readout": "auc"}, "[road]")
    with pytest.raises(UserError, match="noise must be a standard deviation >= 0"):
        from_table(RoadConfig, {"noise": -0.1}, "[road]")
    with pytest.raises(UserError, match="unknown key"):
        from_table(RoadConfig, {"order": "lerf"}, "[road]")
    assert from_table(RoadConfig, {"fractions": [0.5, 0.9]}, "[road]").fractions == (0.5, 0.9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_imputation_and_its_noise_on_cuda_match_the_cpu():
    images = smooth_images(4, 3, 40)
    removed = blob(40, 0.8, 4) | (torch.rand(4, 40, 40, generator=GEN) < 0.3)
    ids = torch.tensor([3, 1, 4, 1])
    cpu = noisy_linear_imputation(images, removed, noise=0.01, seed=5, ids=ids)
    cuda = noisy_linear_imputation(images.cuda(), removed.cuda(), noise=0.01, seed=5, ids=ids.cuda())
    assert (cuda.cpu() - cpu).abs().max() < 6e-5  # float32, tol 1e-5: each within ~3e-5 of the exact solution
    f64 = {"noise": 0.01, "seed": 5, "tol": 1e-10, "dtype": torch.float64}
    cpu = noisy_linear_imputation(images.double(), removed, ids=ids, **f64)
    cuda = noisy_linear_imputation(images.double().cuda(), removed.cuda(), ids=ids.cuda(), **f64)
    assert (cuda.cpu() - cpu).abs().max() < 1e-8
