"""LIME and Shapley value sampling over image segments, batched across samples.

Captum's ``Lime`` fits one surrogate per call and takes one sample at a time, and its
``ShapleyValueSampling`` draws one set of permutations for a whole batch (so a sample's map would
depend on how many segments the other samples have). These functions run the perturbations of
many samples through one model call (``max_batch`` inputs at most) while drawing every sample's
random numbers exactly as Captum does for that sample alone under ``torch.manual_seed(seed)``: the
maps equal Captum's per-sample maps up to float rounding (tested against Captum), and a sample's
map never depends on its batch.

Model calls are shared wherever the inputs coincide: jobs are deduplicated by (sample content,
kept segments), so the cells of one GridPG grid (the same image explained for several targets) and
repeated draws of the same segment subset cost one evaluation, whose class scores serve every target.

Features are segment ids 0..K_i-1 of each sample's (H, W) segment map; samples with fewer
segments than the batch's largest are padded with features that never occur (they get weight 0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from faithbench.attributions.shared_forward import first_equal
from faithbench.calls import call_key, in_chunks

ScoreFn = Callable[[Tensor], Tensor]
"""``score(inputs (n, C, H, W)) -> (n, num_classes)``: the explained outputs, e.g. class probabilities."""


def _n_segments(segments: Tensor) -> Tensor:
    return segments.flatten(1).amax(dim=1) + 1


def _representatives(inputs: Tensor, segments: Tensor) -> Tensor:
    """(B,) for every sample the first sample with the same input bits and segments (itself if none)."""
    b = inputs.shape[0]
    flat = inputs.reshape(b, -1).contiguous()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    return first_equal(torch.cat([flat.view(as_int).long(), segments.reshape(b, -1).long()], dim=1)).cpu()


def _inert(inputs: Tensor, segments: Tensor, baseline: float | Tensor, k_max: int) -> Tensor:
    """(B, K) True where every pixel (all channels) of segment k of sample i already equals the baseline."""
    b = inputs.shape[0]
    base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device)
    differs = (inputs != base).flatten(1, -1 - segments[0].dim()).any(dim=1).flatten(1).long()  # (B, pixels)
    counts = torch.zeros(b, k_max, dtype=torch.long, device=inputs.device)
    return counts.scatter_add_(1, segments.to(inputs.device).flatten(1), differs) == 0


def _evaluate(
    score: ScoreFn,
    inputs: Tensor,
    segments: Tensor,
    targets: Tensor,
    baseline: float | Tensor,
    job_sample: Tensor,
    job_present: Tensor,
    max_batch: int,
) -> Tensor:
    """Scores (J,) of every job: its sample with the segments ``job_present`` (J, K) kept, the rest
    ``baseline``, read at its sample's target. Identical jobs (same sample content, same kept segments)
    are evaluated once."""
    key = torch.cat([_representatives(inputs, segments)[job_sample].view(-1, 1), job_present.long()], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device)

    def chunk(start: int, stop: int) -> Tensor:
        rows = unique[start:stop].to(inputs.device)
        b, present = rows[:, 0], rows[:, 1:].bool()
        keep = present.gather(1, segments[b].flatten(1)).view(len(b), 1, *segments.shape[1:])
        return score(torch.where(keep, inputs[b], base)).float()

    key = call_key(score, tuple(inputs.shape[1:]), "without")
    scores = torch.cat(in_chunks(chunk, unique.shape[0], max_batch, key=key))
    return scores[inverse.to(scores.device), targets[job_sample.to(targets.device)]]


@torch.no_grad()
def lime_weights(
    score: ScoreFn,
    inputs: Tensor,
    segments: Tensor,
    targets: Tensor,
    *,
    n_samples: int,
    baseline: float | Tensor = 0.0,
    kernel_width: float = 0.25,
    alpha: float = 1.0,
    seed: int = 0,
    max_batch: int = 256,
) -> Tensor:
    """LIME surrogate weights (B, K_max) per segment, as Captum ``Lime`` with a ridge surrogate.

    For sample i with K_i segments: ``n_samples`` binary vectors z ~ Bernoulli(0.5)^K_i (drawn on
    the CPU generator seeded with ``seed``, as Captum's default sampler), inputs
    x_z = z[seg] * x + (1 - z[seg]) * baseline, outputs y_z = score(x_z), weights
    pi_z = exp(-d_z^2 / (2 kernel_width^2)) with d_z = 1 - cos(x, x_z) (Captum's exponential
    cosine kernel), and the weighted ridge regression with intercept (sklearn ``Ridge(alpha)``)

        beta = argmin_b  sum_z pi_z (y_z - b0 - b . z)^2 + alpha ||b||^2,

    solved in closed form on the pi-weighted centred data, in float64.
    """
    b = inputs.shape[0]
    k = _n_segments(segments).tolist()
    k_max = max(k)
    z = torch.zeros(b, n_samples, k_max)
    for k_i in set(k):  # the draws depend only on K and the seed: once per distinct segment count
        # Captum draws one (1, K) Bernoulli vector per perturbation from the global generator seeded with
        # ``seed``; one (n, K) draw from an equally seeded generator consumes the same stream, row by row.
        gen = torch.Generator().manual_seed(seed)
        z[torch.tensor(k) == k_i, :, :k_i] = torch.bernoulli(torch.full((n_samples, k_i), 0.5), generator=gen)
    job_sample = torch.arange(b).repeat_interleave(n_samples)
    present = z.view(b * n_samples, k_max).bool()
    y = _evaluate(score, inputs, segments, targets, baseline, job_sample, present, max_batch).view(b, n_samples)
    # Cosine distance of every perturbed input to its original from per-segment sums (no perturbed
    # input is materialised): with x_z = z[seg] x + (1 - z[seg]) b, x.x_z = sum_k z_k xx_k + (1 - z_k) xb_k
    # and |x_z|^2 = sum_k z_k xx_k + (1 - z_k) bb_k, where xx_k, xb_k, bb_k sum over segment k's pixels.
    x = inputs.flatten(2).double()  # (B, C, P)
    base = torch.as_tensor(baseline, dtype=torch.float64, device=inputs.device).expand_as(inputs).flatten(2)
    seg = segments.flatten(1).to(inputs.device)

    def per_segment(values: Tensor) -> Tensor:  # (B, C, P) -> (B, K)
        return torch.zeros(b, k_max, dtype=torch.float64, device=inputs.device).scatter_add_(1, seg, values.sum(1))

    xx, xb, bb = per_segment(x * x), per_segment(x * base), per_segment(base * base)
    zd = z.to(inputs.device).double()
    dot = zd @ xx.unsqueeze(2) + (1 - zd) @ xb.unsqueeze(2)
    norm2 = zd @ xx.unsqueeze(2) + (1 - zd) @ bb.unsqueeze(2)
    cos = (dot / (xx.sum(1).view(b, 1, 1) * norm2).sqrt().clamp_min(1e-8)).squeeze(2)
    weights = torch.exp(-((1 - cos) ** 2) / (2 * kernel_width**2))
    return _weighted_ridge(zd, y.double(), weights, alpha).to(inputs.dtype)


def _weighted_ridge(x: Tensor, y: Tensor, w: Tensor, alpha: float) -> Tensor:
    """Coefficients (B, K) of per-sample weighted ridge regressions with intercept (x (B, n, K), y, w (B, n))."""
    w_sum = w.sum(dim=1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    x_mean = (w.unsqueeze(2) * x).sum(dim=1, keepdim=True) / w_sum.unsqueeze(2)
    y_mean = (w * y).sum(dim=1, keepdim=True) / w_sum
    xc, yc = x - x_mean, y - y_mean
    gram = xc.transpose(1, 2) @ (w.unsqueeze(2) * xc)
    gram = gram + alpha * torch.eye(x.shape[2], dtype=x.dtype, device=x.device)
    rhs = xc.transpose(1, 2) @ (w * yc).unsqueeze(2)
    return torch.linalg.solve(gram, rhs).squeeze(2)


@torch.no_grad()
def shapley_sampling_values(
    score: ScoreFn,
    inputs: Tensor,
    segments: Tensor,
    targets: Tensor,
    *,
    n_samples: int,
    baseline: float | Tensor = 0.0,
    seed: int = 0,
    max_batch: int = 256,
) -> Tensor:
    """Shapley value sampling estimates (B, K_max) per segment, as Captum ``ShapleyValueSampling``.

    For sample i: ``n_samples`` permutations pi of its K_i segments (``torch.randperm`` on the CPU
    generator seeded with ``seed``, as Captum draws them); starting from the all-baseline input,
    segments are added in the order pi and each is credited with the change of the score it
    causes; phi_k = (1 / n_samples) * sum_pi [score(S_pi,k + {k}) - score(S_pi,k)], with S_pi,k the
    segments before k in pi. One model evaluation per (permutation, segment) plus the baseline. A segment whose
    pixels all equal the baseline gets exactly 0.
    """
    b = inputs.shape[0]
    k = _n_segments(segments).tolist()
    k_max = max(k)
    order = torch.full((b, n_samples, k_max), k_max, dtype=torch.long)  # position of each segment in pi
    perms = torch.zeros(b, n_samples, k_max, dtype=torch.long)
    for k_i in set(k):  # the permutations depend only on K and the seed: once per distinct segment count
        gen = torch.Generator().manual_seed(seed)
        p = torch.stack([torch.randperm(k_i, generator=gen) for _ in range(n_samples)])  # Captum: one per permutation
        rows = torch.tensor(k) == k_i
        perms[rows, :, :k_i] = p
        order[rows, :, :k_i] = p.argsort(dim=1)
    # Jobs: each sample's baseline, then for every permutation j and step s the first s + 1 segments of pi_j.
    steps = torch.arange(k_max)
    valid = steps.view(1, 1, k_max) < torch.tensor(k).view(b, 1, 1)  # (B, 1, K): step s exists for sample i
    valid = valid.expand(b, n_samples, k_max)
    present = order.unsqueeze(2) <= steps.view(1, 1, k_max, 1)  # (B, n, step, K)
    job_sample = torch.cat([torch.arange(b), torch.arange(b).view(b, 1, 1).expand(b, n_samples, k_max)[valid]])
    job_present = torch.cat([torch.zeros(b, k_max, dtype=torch.bool), present[valid]])
    scores = _evaluate(score, inputs, segments, targets, baseline, job_sample, job_present, max_batch).cpu()
    stepped = torch.zeros(b, n_samples, k_max, dtype=torch.float32)
    stepped[valid] = scores[b:]
    previous = torch.cat([scores[:b].view(b, 1, 1).expand(b, n_samples, 1), stepped[:, :, :-1]], dim=2)
    gains = torch.where(valid, stepped - previous, torch.zeros(()))  # gains[i, j, s]: of segment pi_j[s]
    values = torch.zeros(b, n_samples, k_max).scatter_add_(2, perms, gains).sum(dim=1) / n_samples
    # A segment that already equals the baseline leaves the input as it is: its value is exactly 0 (the dummy
    # axiom), not the difference of two evaluations of one input in two rows of a batch, which the kernels round
    # apart by a few ulps of either sign (another order of the least relevant segments on another machine).
    values = values.masked_fill(_inert(inputs, segments, baseline, k_max).cpu(), 0)
    return values.to(device=inputs.device, dtype=inputs.dtype)


def segment_maps(values: Tensor, segments: Tensor) -> Tensor:
    """Maps (B, H, W) holding each segment's value (values (B, K)) on its pixels."""
    return values.gather(1, segments.flatten(1).to(values.device)).view(segments.shape)


def top_k_mask(weights: Tensor, k: int) -> Tensor:
    """TPAMI's LIME output: 1 on each sample's top-k segments whose weight is positive, else 0."""
    top, idx = weights.topk(min(k, weights.shape[1]), dim=1)
    return torch.zeros_like(weights).scatter_(1, idx, (top > 0).to(weights.dtype))
