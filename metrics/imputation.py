"""ROAD's noisy linear imputation (Rong et al., ICML 2022), batched on the device, and counter-based noise.

Removed pixels are filled by solving, per image and channel, the sparse linear system in which every
removed pixel equals the weighted mean of its in-image 8-neighbours (weight 1/6 for the 4 direct
neighbours, 1/12 for the 4 diagonal ones; at the border the weights of the neighbours that exist are
renormalised), the kept pixels being fixed:

    d_i x_i - sum_{j removed} w_ij x_j = sum_{j kept} w_ij x_j        for every removed pixel i,
    d_i = sum of the weights of i's in-image neighbours

(the discrete Laplace equation with the kept pixels as boundary values: a linear ramp is reproduced
exactly). Then Gaussian noise of standard deviation ``noise`` is added to the imputed values (ROAD's
default 0.01, in image space: the reference code imputes images in [0, 1] before normalising them).

The system is symmetric and positive definite whenever some pixel is kept, so it is solved by
Jacobi-preconditioned conjugate gradients over all images, channels and jobs at once (3 x 3
convolutions, no sparse matrices, no per-image loop), started from a pull-push pyramid fill of the
kept pixels. A system has converged when every removed pixel differs from the weighted mean of its
neighbours by at most ``tol`` (image units); the solver stops when all have, or after ``max_iter``
iterations (with a warning naming the largest residual). An image with no kept pixel has no
information left: its removed pixels take ``fallback`` (the data set's mean colour in the metrics).

Noise (here and for the ``noise`` fill of pixel flipping) is counter-based: a hash of (seed, stream,
sample id, element index), so it does not depend on the batch size, the chunking or the shard (nor,
up to float rounding, on the device), and the same sample sees the same noise field at every fraction
and in both removal orders.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

ROAD_NOISE = 0.01  # ROAD's default sigma (image space)
ROAD_TOL = 1e-6  # largest |x_i - weighted mean of i's neighbours| of a converged system, image units
ROAD_MAX_ITER = 2000  # CG iterations at most (a 224 x 224 image with one 90-99 % hole needs 450-650)
_CHECK_EVERY = 8  # iterations between convergence checks (each one a device -> host sync)

_MASK32 = 0xFFFFFFFF
_MUL = 0x45D9F3B
STREAM_NOISE_FILL = 1  # the ``noise`` fill of pixel flipping
STREAM_ROAD = 2  # ROAD's imputation noise

FillFn = Callable[[Tensor, Tensor], Tensor]
"""``fill(job_samples (n,), removed (n, 1, H, W) bool) -> (n, C, H, W)``: replacements in model-input space."""


def _hash32(x: Tensor) -> Tensor:
    """An integer hash of int64 values in [0, 2^32) (two multiply-xorshift rounds); no int64 overflow."""
    x = x & _MASK32
    x = (((x >> 16) ^ x) * _MUL) & _MASK32
    x = (((x >> 16) ^ x) * _MUL) & _MASK32
    return (x >> 16) ^ x


def hashed_uniform(ids: Tensor, shape: tuple[int, ...], *, seed: int, stream: int, salt: int = 0) -> Tensor:
    """(len(ids), *shape) float64 uniforms in (0, 1), a function of (seed, stream, salt, sample id, element index)."""
    base = _hash32(_hash32(torch.full_like(ids.long(), seed * 7919 + stream * 104729 + salt)) ^ ids.long())
    index = torch.arange(math.prod(shape), device=ids.device, dtype=torch.long)
    h = _hash32(_hash32(base.unsqueeze(1) ^ index.unsqueeze(0)) + salt)
    return ((h.double() + 0.5) / 2.0**32).view(len(ids), *shape)


def hashed_normal(ids: Tensor, shape: tuple[int, ...], *, seed: int, stream: int) -> Tensor:
    """(len(ids), *shape) float64 standard normal values (Box-Muller on two hashed uniforms)."""
    u1 = hashed_uniform(ids, shape, seed=seed, stream=stream, salt=0)
    u2 = hashed_uniform(ids, shape, seed=seed, stream=stream, salt=0x68E31DA4)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)


def _pull_push(values: Tensor, known: Tensor, fallback: Tensor) -> Tensor:
    """A smooth fill of the unknown pixels from the known ones (weighted means over a 2 x 2 pyramid, coarse
    estimates interpolated back where a level has no known pixel): CG's starting point. (N, 1, H, W)."""
    nums, dens = [values * known], [known]
    while min(nums[-1].shape[-2:]) > 1:
        nums.append(F.avg_pool2d(nums[-1], 2, ceil_mode=True))
        dens.append(F.avg_pool2d(dens[-1], 2, ceil_mode=True))
    est = torch.where(dens[-1] > 0, nums[-1] / dens[-1].clamp(min=1e-30), fallback)
    for num, den in zip(reversed(nums[:-1]), reversed(dens[:-1]), strict=True):
        coarse = F.interpolate(est, size=num.shape[-2:], mode="bilinear", align_corners=False)
        est = torch.where(den > 0, num / den.clamp(min=1e-30), coarse)
    return est


def _neighbour_sum(u: Tensor) -> Tensor:
    """sum_j w_ij u_j over the in-image 8-neighbours j of every pixel i (1/6 direct, 1/12 diagonal): the kernel
    is (s s^T) / 12 - delta / 3 with s = (1, 2, 1), applied separably with zeros outside the image."""
    v = F.pad(u, (1, 1, 1, 1))
    rows = v[..., :-2, :] + 2 * v[..., 1:-1, :] + v[..., 2:, :]
    both = rows[..., :-2] + 2 * rows[..., 1:-1] + rows[..., 2:]
    return both / 12 - u / 3


def _solve(x_img: Tensor, m: Tensor, fb: Tensor, tol: float, max_iter: int) -> tuple[Tensor, int, float]:
    """Jacobi-preconditioned CG for the removed pixels ``m`` (N, 1, H, W) of ``x_img`` (float64), started from
    the pull-push fill."""
    h, w = x_img.shape[-2:]
    keep = 1 - m
    x = m * _pull_push(x_img, keep, fb)
    inv_d = 1 / _neighbour_sum(torch.ones(1, 1, h, w, dtype=x_img.dtype, device=x_img.device))
    d = 1 / inv_d

    def apply(u: Tensor) -> Tensor:  # A u for u supported on the removed pixels
        return m * (d * u - _neighbour_sum(u))

    rhs = m * _neighbour_sum(x_img * keep)
    r = rhs - apply(x)
    z = r * inv_d
    p = z
    rz = (r * z).sum(dim=(1, 2, 3), keepdim=True)
    tiny = torch.finfo(x_img.dtype).tiny
    its, worst = 0, float((r.abs() * inv_d).amax()) if len(x) else 0.0
    while its < max_iter and worst > tol:
        for _ in range(min(_CHECK_EVERY, max_iter - its)):
            ap = apply(p)
            pap = (p * ap).sum(dim=(1, 2, 3), keepdim=True)
            alpha = torch.where(pap > 0, rz / pap.clamp(min=tiny), 0)
            x = x + alpha * p
            r = r - alpha * ap
            z = r * inv_d
            rz_new = (r * z).sum(dim=(1, 2, 3), keepdim=True)
            beta = torch.where(rz > 0, rz_new / rz.clamp(min=tiny), 0)
            p = z + beta * p
            rz = rz_new
            its += 1
        worst = float(((rhs - apply(x)).abs() * inv_d).amax())  # the true residual, not the recursive one
    return torch.where(m > 0, x, x_img), its, worst


@torch.no_grad()
def linear_imputation(
    images: Tensor,
    removed: Tensor,
    *,
    tol: float = ROAD_TOL,
    max_iter: int = ROAD_MAX_ITER,
    fallback: float | Tensor = 0.5,
) -> tuple[Tensor, int, float]:
    """Noise-free linear imputation of ``removed`` (B, H, W) bool pixels of ``images`` (B, c, H, W).

    Returns the imputed images in their dtype (kept pixels bit-identical), the CG iterations run and the
    largest final residual (image units). ``fallback``: a value or per-channel (c,) / (B, c) values for
    images with every pixel removed. Solves in float64 (float32 cannot reach ``tol`` = 1e-6 on large holes).
    """
    if images.dim() != 4 or removed.shape != (images.shape[0], *images.shape[-2:]):
        raise ValueError(
            f"images must be (B, c, H, W) and removed (B, H, W) bool; got {tuple(images.shape)} and "
            f"{tuple(removed.shape)}"
        )
    if not images.is_floating_point():
        raise TypeError(f"images must be floating point in [0, 1], got dtype {images.dtype}")
    if not tol > 0 or isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"tol must be > 0 and max_iter a positive integer, got tol={tol!r}, max_iter={max_iter!r}")
    b, c, h, w = images.shape
    n = b * c
    f64 = torch.float64
    x_img = images.to(f64).reshape(n, 1, h, w)
    m = removed.to(f64).repeat_interleave(c, dim=0).unsqueeze(1)  # 1 = removed
    fb = torch.as_tensor(fallback, dtype=f64, device=images.device)
    fb = (fb.expand(b, c) if fb.dim() <= 1 else fb).reshape(n, 1, 1, 1)
    x, its, worst = _solve(x_img, m, fb, tol, max_iter)
    if worst > tol:
        warnings.warn(
            f"linear imputation stopped after max_iter={max_iter} CG iterations with a residual of {worst:.2e} "
            f"(tol {tol:.0e}); raise max_iter or tol",
            RuntimeWarning,
            stacklevel=3,
        )
    out = torch.where(m > 0, x, x_img).to(images.dtype).reshape(b, c, h, w)
    return torch.where(removed.unsqueeze(1), out, images), its, worst


def noisy_linear_imputation(
    images: Tensor,
    removed: Tensor,
    *,
    noise: float = ROAD_NOISE,
    seed: int = 0,
    ids: Tensor | None = None,
    tol: float = ROAD_TOL,
    max_iter: int = ROAD_MAX_ITER,
    fallback: float | Tensor = 0.5,
) -> Tensor:
    """ROAD's imputation: :func:`linear_imputation` plus N(0, noise^2) on every imputed value (image space).

    ``ids`` (B,) key the noise (see the module docstring); default 0..B-1.
    """
    if not noise >= 0:
        raise ValueError(f"noise must be a standard deviation >= 0 (image units), got {noise!r}")
    out, _, _ = linear_imputation(images, removed, tol=tol, max_iter=max_iter, fallback=fallback)
    if noise > 0:
        ids = torch.arange(len(images), device=images.device) if ids is None else ids.to(images.device)
        eps = hashed_normal(ids, tuple(images.shape[1:]), seed=seed, stream=STREAM_ROAD).to(images.dtype)
        out = torch.where(removed.unsqueeze(1), out + noise * eps, out)
    return out


def road_fill(
    images: Tensor,
    encode: Callable[[Tensor], Tensor],
    *,
    ids: Tensor,
    noise: float = ROAD_NOISE,
    seed: int = 0,
    fallback: float | Tensor = 0.5,
    tol: float = ROAD_TOL,
    max_iter: int = ROAD_MAX_ITER,
) -> FillFn:
    """A fill for :func:`faithbench.metrics._perturb.probabilities_after_removal`: impute each job's removed
    pixels in image space (``images`` (B, c, H, W) in [0, 1], sample ids ``ids`` (B,)) and encode the result."""

    def fill(job_samples: Tensor, removed: Tensor) -> Tensor:
        imputed = noisy_linear_imputation(
            images[job_samples],
            removed.reshape(len(job_samples), *images.shape[-2:]),
            noise=noise,
            seed=seed,
            ids=ids[job_samples],
            tol=tol,
            max_iter=max_iter,
            fallback=fallback,
        )
        return encode(imputed)

    return fill
