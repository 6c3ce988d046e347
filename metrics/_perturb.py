"""Batched "remove the top-k features and ask the model again" engine.

Comprehensiveness/sufficiency and pixel deletion/insertion are all the same computation: rank
each sample's features by attribution once, then for many (sample, k, mode) jobs replace either
the top-k features or everything but the top-k by a baseline and read the explained class's
probability. Jobs are materialised chunk by chunk (``chunk_size`` perturbed inputs per model
call), so memory is bounded and the model sees as few, as large batches as allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import torch
from torch import Tensor

from faithbench import calls
from faithbench.activations import to_probabilities
from faithbench.metrics._checks import check_positive_int

ForwardFn = Callable[..., Tensor]
"""``forward(inputs, **extra) -> scores (n, num_classes)`` (logits unless ``activation='identity'``)."""


RANK_BITS = 16
"""Significant bits of an attribution that order features (:func:`feature_ranks`): float32 carries 24, of which the
last few are the rounding of whichever kernels computed the map."""


def rank_keys(scores: Tensor, bits: int | None = RANK_BITS) -> Tensor:
    """``scores`` rounded to ``bits`` significant bits (half to even; ``None``: unchanged); exact in float32 and 64.

    Scores that agree to within float32 rounding (the same map from another CPU's kernels, a GPU, another batch
    size) round to the same key, so they tie and are ordered by position, the same on every machine. Without it,
    values that are equal in exact arithmetic (a GradCAM map's upsampled cells, a B-cosified model's mirrored
    channels) reach a removal curve in whichever order their last bits put them (measured: 4 of 16 GradCAM SRG
    scores on ``bcosified_cnn_mnist`` moved by up to 0.0035 between two x86-64 CPU types). Symmetric: ``rank_keys(-s)
    == -rank_keys(s)``, so LeRF (the negated map's MoRF) ties the same features. A key changes the order of two
    features only where they differ by less than 2^-bits of their magnitude.
    """
    scores = scores if scores.dtype in (torch.float32, torch.float64) else scores.float()
    if bits is None:
        return scores
    check_positive_int(bits, "bits")
    mantissa, exponent = torch.frexp(scores)  # scores = mantissa * 2^exponent, |mantissa| in [0.5, 1)
    return torch.ldexp(torch.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


def feature_ranks(scores: Tensor, valid: Tensor | None = None, *, bits: int | None = RANK_BITS) -> Tensor:
    """Rank of every feature within its sample, 0 = highest score (B, n) -> (B, n) long.

    Features are ordered by their scores to ``bits`` significant bits (:func:`rank_keys`); ties are broken by
    position (earlier first: a stable sort). Invalid features (``valid`` False) rank after every valid one, so they
    are never inside a top-k with k <= number of valid features.
    """
    scores = rank_keys(scores, bits)
    if valid is not None:
        scores = scores.masked_fill(~valid, float("-inf"))
    order = scores.argsort(dim=1, descending=True, stable=True)
    ranks = torch.empty_like(order)
    ranks.scatter_(1, order, torch.arange(scores.shape[1], device=scores.device).expand_as(order))
    return ranks


def unranked(attributions: Tensor, valid: Tensor | None = None) -> Tensor:
    """(B,) True where a map is 0 on every (valid) feature: it orders no feature before another, so a removal curve
    over it is the tie order's (by position), not the map's. The removal metrics flag such samples undefined and keep
    their value (:class:`~faithbench.metrics.types.Scores`); the statistics and the report card leave them out."""
    nonzero = attributions.reshape(attributions.shape[0], -1) != 0
    if valid is not None:
        nonzero = nonzero & valid.reshape(nonzero.shape)
    return ~nonzero.any(dim=1)


def check_class_indices(targets: Tensor, num_classes: int, name: str = "targets") -> None:
    """Every target must index one of the model's ``num_classes`` outputs."""
    bad = (targets < 0) | (targets >= num_classes)
    if bool(bad.any()):
        raise ValueError(
            f"{name} must be class indices in 0..{num_classes - 1} (the model has {num_classes} outputs); got "
            f"{targets[bad][:8].tolist()} in samples {bad.nonzero().flatten()[:8].tolist()}"
        )


@torch.no_grad()
def probabilities_after_removal(
    forward: ForwardFn,
    inputs: Tensor,
    ranks: Tensor,
    targets: Tensor,
    *,
    job_sample: Tensor,
    job_k: Tensor,
    job_keep_top: Tensor,
    baseline: float | int | Tensor,
    activation: str,
    chunk_size: int,
    protected: Tensor | None = None,
    extra: Mapping[str, Tensor] | None = None,
    fill: Callable[[Tensor, Tensor], Tensor] | None = None,
    score: Callable[[Tensor, Tensor], Tensor] | None = None,
    call_key: Hashable | None = None,
) -> Tensor:
    """Probability of ``targets[job_sample[j]]`` for every job j after perturbing its sample.

    Args:
        inputs: (B, *C, *S) model inputs; features live on the trailing dims S of ``ranks``.
        ranks: (B, *S) feature ranks (see :func:`feature_ranks`), broadcast over the channel dims C.
        job_sample, job_k, job_keep_top: (J,) sample index, k, and mode of each job. A job removes
            its sample's top-k features (``keep_top`` False) or every feature except the top k
            (``keep_top`` True). Removed features take the ``baseline`` value: a scalar, a tensor
            broadcastable to one input (C, H, W), or one baseline per sample (``inputs.shape``).
        protected: (B, *S) bool, features that ``keep_top`` jobs never remove (e.g. special tokens).
        extra: per-sample side inputs (B, ...) passed to ``forward`` as keyword arguments, gathered
            for each chunk (e.g. an attention mask).
        fill: ``fill(job samples (n,), removed (n, *1, *S) bool) -> (n, *C, *S)``: the replacement of each
            job's removed features, computed from its removal pattern (ROAD's imputation); ``baseline`` is
            then unused.
        score: ``score(scores (n, K), targets (n,)) -> (n,)``, the value recorded per job instead of the
            target's probability (e.g. whether the target is still the predicted class).
        call_key: what the chunk size found after an out-of-memory error is kept under
            (:func:`faithbench.calls.in_chunks`; None: ``forward`` itself, by identity, and the input shape).
    Returns:
        (J,) probabilities (or ``score`` values).
    """
    check_positive_int(chunk_size, "chunk_size")
    feat_dims = ranks.dim() - 1
    chan_dims = inputs.dim() - 1 - feat_dims
    extra = dict(extra or {})
    base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device)
    per_sample = base.dim() == inputs.dim() and base.shape == inputs.shape

    def chunk(start: int, stop: int) -> Tensor:
        b = job_sample[start:stop]
        n = b.shape[0]
        top = ranks[b] < job_k[start:stop].view(n, *([1] * feat_dims))
        keep_top = job_keep_top[start:stop].view(n, *([1] * feat_dims))
        remove = torch.where(keep_top, ~top, top)
        if protected is not None:
            remove &= ~(protected[b] & keep_top)
        remove = remove.view(n, *([1] * chan_dims), *ranks.shape[1:])
        if fill is not None:
            replacement = fill(b, remove)
        else:
            replacement = base[b] if per_sample else base
        perturbed = torch.where(remove, replacement, inputs[b])
        scores = forward(perturbed, **{key: value[b] for key, value in extra.items()})
        if start == 0:
            check_class_indices(targets, scores.shape[1])
        if score is not None:
            return score(scores.float(), targets[b]).float()
        probs = to_probabilities(scores.float(), activation)
        return probs.gather(1, targets[b].unsqueeze(1)).squeeze(1).float()

    key = call_key or calls.call_key(forward, tuple(inputs.shape[1:]), "without")
    out = calls.in_chunks(chunk, job_sample.shape[0], chunk_size, key=key)
    return torch.cat(out) if out else torch.empty(0, dtype=torch.float32, device=inputs.device)
