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

The system is symmetric and positive definite whenever some pixel is kept, so it is solved by conjugate
gradients preconditioned with one multigrid V-cycle (:mod:`faithbench.metrics._laplace`), over all images,
channels and jobs at once (3 x 3 stencils, no sparse matrices, no per-image loop; on the CPU in groups of images
whose systems fit in :data:`CPU_GROUP_BYTES`, so that they stay in cache), started from a pull-push pyramid fill of
the kept pixels, in ``dtype`` (default float32). The V-cycle M approximates A^-1, so
e_i = |(M r)_i| with r = b - A x estimates the error left at pixel i; an image has converged when

    max_i |(M r)_i| <= tol                     (image units, over its channels; default 1e-5)

and the solver stops when all have, or after ``max_iter`` iterations (with a warning naming the largest
estimate). A float32 solve is then refined in float64 (:func:`faithbench.metrics._laplace.refine`: r = b - A x in
float64, a float32 correction solve, until the correction is within tol): on a few kept pixels bunched together
float32 CG alone stalls at a true error of 1e-3 to 1e-2 while its recursive residual says tol. The default keeps the
imputation within ~3e-5 of the exact solution (measured against float64 solves to 1e-11, corner and centre blocks and
single kept pixels included, and Quantus' sparse direct solve): 300 times below ROAD's noise of 0.01, so the imputed
images follow ROAD's distribution. An image with no kept pixel has no information left: its removed pixels take
``fallback`` (the data set's mean colour in the metrics).

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

from faithbench.metrics._laplace import cell_sums, refine, solve, stencil

ROAD_NOISE = 0.01  # ROAD's default sigma (image space)
ROAD_TOL = 1e-5  # max |M r| of a converged image: the V-cycle's estimate of the error left, image units
ROAD_MAX_ITER = 200  # CG iterations at most (10-15 on 28-224 px images, scattered pixels or one 90 % hole)
ROAD_DTYPE = torch.float32  # the solver's dtype: float32 reaches ~1e-6; float64 for smaller tolerances
CPU_GROUP_BYTES = 4 * 2**20  # on the CPU, images are solved in groups whose (c, H, W) systems fit this (cache-sized)

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


def road_noise(ids: Tensor, shape: tuple[int, ...], *, noise: float, seed: int, dtype: torch.dtype) -> Tensor:
    """ROAD's imputation noise of the samples ``ids``: noise * N(0, 1) fields (len(ids), *shape) in ``dtype``."""
    return noise * hashed_normal(ids, shape, seed=seed, stream=STREAM_ROAD).to(dtype)


def _pull_push(kept: Tensor, known: Tensor, fallback: Tensor) -> Tensor:
    """A smooth fill from the known pixels (``kept`` = values * ``known``): means of the known pixels of 2 x 2
    cells, level by level, and back down each level's known means, bilinearly interpolated from the coarser
    level where a cell has no known pixel (``fallback`` where none has). CG's start on the removed pixels."""
    nums, dens = [kept], [known]
    while min(nums[-1].shape[-2:]) > 1:
        nums.append(cell_sums(nums[-1]))
        dens.append(cell_sums(dens[-1]))
    est = torch.where(dens[-1] > 0, nums[-1] / dens[-1].clamp(min=1e-30), fallback)
    for num, den in zip(reversed(nums[1:-1]), reversed(dens[1:-1]), strict=True):
        est = torch.where(den > 0, num / den.clamp(min=1e-30), _bilinear(est, num.shape[-2:]))
    return _bilinear(est, kept.shape[-2:])


def _bilinear(x: Tensor, size: tuple[int, ...]) -> Tensor:
    """(B, C, h, w) bilinearly resized to ``size``, one channel at a time (PyTorch's CPU kernel is 3x slower
    on 3 channels than on 3 single-channel images)."""
    b, c = x.shape[:2]
    out = F.interpolate(x.reshape(b * c, 1, *x.shape[-2:]), size=tuple(size), mode="bilinear", align_corners=False)
    return out.view(b, c, *size)


def _check(images: Tensor, removed: Tensor, tol: float, max_iter: int) -> None:
    if images.dim() != 4 or removed.shape != (images.shape[0], *images.shape[-2:]):
        raise ValueError(
            f"images must be (B, c, H, W) and removed (B, H, W) bool; got {tuple(images.shape)} and "
            f"{tuple(removed.shape)}"
        )
    if not images.is_floating_point():
        raise TypeError(f"images must be floating point in [0, 1], got dtype {images.dtype}")
    if not tol > 0 or isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"tol must be > 0 and max_iter a positive integer, got tol={tol!r}, max_iter={max_iter!r}")


@torch.no_grad()
def linear_imputation(
    images: Tensor,
    removed: Tensor,
    *,
    tol: float = ROAD_TOL,
    max_iter: int = ROAD_MAX_ITER,
    fallback: float | Tensor = 0.5,
    dtype: torch.dtype = ROAD_DTYPE,
) -> tuple[Tensor, int, float]:
    """Noise-free linear imputation of ``removed`` (B, H, W) bool pixels of ``images`` (B, c, H, W).

    Returns the imputed images in their dtype (kept pixels bit-identical), the CG iterations run and the
    largest final error estimate max |M r| (image units; of the images still iterated at the end).
    ``fallback``: a value or per-channel (c,) / (B, c) values for images with every pixel removed. Solves in
    ``dtype`` (float32 reaches ``tol`` down to ~1e-6; float64 below).
    """
    _check(images, removed, tol, max_iter)
    return _impute(images, removed, tol, max_iter, fallback, dtype, None)


@torch.no_grad()
def _impute(
    images: Tensor,
    removed: Tensor,
    tol: float,
    max_iter: int,
    fallback: float | Tensor,
    dtype: torch.dtype,
    eps: Tensor | None,
) -> tuple[Tensor, int, float]:
    """:func:`linear_imputation` without the checks, plus ``eps`` (B, c, H, W) on the removed pixels if given. On the
    CPU the images are solved in groups of :func:`cpu_group` (each group to its own tolerance)."""
    b, c = images.shape[:2]
    fb = torch.as_tensor(fallback, dtype=dtype, device=images.device)
    fb = (fb.expand(b, c) if fb.dim() <= 1 else fb).reshape(b, c, 1, 1)
    size = b if images.device.type != "cpu" else cpu_group(images[0].numel(), dtype)
    outs, its, worst = [], 0, 0.0
    for s in range(0, b, size):
        g = slice(s, s + size)
        x, n, err = _solve_group(images[g], removed[g], tol, max_iter, fb[g], dtype)
        outs.append(x.to(images.dtype))
        its, worst = max(its, n), max(worst, err)
    if worst > tol:
        warnings.warn(
            f"linear imputation stopped after max_iter={max_iter} CG iterations with an error estimate of "
            f"{worst:.2e} (tol {tol:.0e}); raise max_iter or tol",
            RuntimeWarning,
            stacklevel=3,
        )
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return torch.where(removed.unsqueeze(1), out if eps is None else out + eps, images), its, worst


def cpu_group(values_per_image: int, dtype: torch.dtype) -> int:
    """Images per solve on the CPU: as many as keep one (c, H, W) system of each at most :data:`CPU_GROUP_BYTES`
    (the solver's ~10 arrays then stay in cache: 4.7x faster than one batch of 56 at 224 px on 2 cores, the same at
    96 px; MNIST's 28 px images are imputed 1,337 at a time, i.e. every chunk in one batch)."""
    return max(1, CPU_GROUP_BYTES // (values_per_image * torch.finfo(dtype).bits // 8))


def _solve_group(
    images: Tensor, removed: Tensor, tol: float, max_iter: int, fb: Tensor, dtype: torch.dtype
) -> tuple[Tensor, int, float]:
    """The solution (B, c, H, W) in ``dtype`` (float64 after refinement) on the removed pixels, the iterations run and
    the largest final error estimate, of images solved together (``fb`` (B, c, 1, 1): the fallback values)."""
    x_img = images.to(dtype)
    m = removed.to(dtype).unsqueeze(1)  # (B, 1, H, W), 1 = removed: one mask for the c channels' systems
    kept = x_img * (1 - m)
    x0 = m * _pull_push(kept, 1 - m, fb)
    rhs = (m / 12) * stencil(kept)  # sum_{j kept} w_ij x_j: kept is 0 at i, so the stencil's centre adds nothing
    x, its, worst = solve(rhs, x0, m, tol, max_iter)
    if dtype != torch.float64 and worst <= tol:  # a float32 solve's true error can exceed tol: corrected in float64
        m64 = removed.double().unsqueeze(1)
        x, more, worst = refine((m64 / 12) * stencil(images.double() * (1 - m64)), x, m, tol, max_iter)
        its += more
    return x, its, worst


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
    dtype: torch.dtype = ROAD_DTYPE,
) -> Tensor:
    """ROAD's imputation: :func:`linear_imputation` plus N(0, noise^2) on every imputed value (image space).

    ``ids`` (B,) key the noise (see the module docstring); default 0..B-1.

    Example:
        >>> import torch
        >>> from faithbench.metrics.imputation import noisy_linear_imputation
        >>> i = torch.arange(4.0)
        >>> image = (i[:, None] + i[None, :]).expand(1, 1, 4, 4)  # a linear ramp
        >>> removed = torch.zeros(1, 4, 4, dtype=torch.bool)
        >>> removed[0, 1:3, 1:3] = True  # the 4 inner pixels
        >>> out = noisy_linear_imputation(image / 6, removed, noise=0.0)
        >>> torch.allclose(out, image / 6, atol=1e-4)  # each pixel the mean of its neighbours: the ramp comes back
        True
    """
    if not noise >= 0:
        raise ValueError(f"noise must be a standard deviation >= 0 (image units), got {noise!r}")
    _check(images, removed, tol, max_iter)
    eps = None
    if noise > 0:
        ids = torch.arange(len(images), device=images.device) if ids is None else ids.to(images.device)
        eps = road_noise(ids, tuple(images.shape[1:]), noise=noise, seed=seed, dtype=images.dtype)
    return _impute(images, removed, tol, max_iter, fallback, dtype, eps)[0]


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
    dtype: torch.dtype = ROAD_DTYPE,
) -> FillFn:
    """A fill for :func:`faithbench.metrics._perturb.probabilities_after_removal`: impute each job's removed
    pixels in image space (``images`` (B, c, H, W) in [0, 1], sample ids ``ids`` (B,)) and encode the result.
    Equal to :func:`noisy_linear_imputation` of the jobs; each sample's noise field is computed once."""
    if not noise >= 0:
        raise ValueError(f"noise must be a standard deviation >= 0 (image units), got {noise!r}")
    shape = tuple(images.shape[1:])
    eps = road_noise(ids.to(images.device), shape, noise=noise, seed=seed, dtype=images.dtype) if noise > 0 else None

    def fill(job_samples: Tensor, removed: Tensor) -> Tensor:
        removed = removed.reshape(len(job_samples), *shape[-2:])
        noise_field = None if eps is None else eps[job_samples]
        imputed, _, _ = _impute(images[job_samples], removed, tol, max_iter, fallback, dtype, noise_field)
        return encode(imputed)

    return fill
