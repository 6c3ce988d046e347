"""The lower and upper AOPC bounds of a model on each input (NAOPC, Edin et al. 2025; see :mod:`.naopc`): the
extremes of AOPC over every order in which a sample's features can be removed, exactly over the subset lattice for
short inputs and by the authors' beam search otherwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.activations import ACTIVATIONS, to_probabilities
from faithbench.calls import call_key, in_chunks
from faithbench.metrics._checks import check_choice, check_positive_int, check_targets, check_tensor
from faithbench.metrics._perturb import check_class_indices

ForwardFn = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class AopcBounds:
    """Per-sample lower and upper AOPC bounds (B,) and whether each was found exactly."""

    lower: Tensor
    upper: Tensor
    exact: Tensor


class Removal:
    """p_t of samples with sets of their features removed, in model calls of ``chunk_size`` inputs."""

    def __init__(self, forward, inputs, targets, baseline, activation, chunk_size, features=None):
        self.forward, self.inputs, self.targets, self.activation = forward, inputs, targets, activation
        self.base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device).expand_as(inputs)
        self.chunk, self.calls, self.count = chunk_size, 0, 0
        self.features = None if features is None else features.to(inputs.device)

    def __call__(self, sample: Tensor, removed: Tensor) -> Tensor:
        """(J,) p_t of ``inputs[sample[j]]`` with the positions ``removed[j]`` (J, T) bool replaced by the baseline."""

        def chunk(start: int, stop: int) -> Tensor:
            s, gone = sample[start:stop], removed[start:stop]
            if self.features is not None:  # image features: each pixel removed with its cell
                gone = gone[:, self.features]
            gone = gone.view(len(s), *[1] * (self.inputs.dim() - gone.dim()), *gone.shape[1:])
            scores = self.forward(torch.where(gone, self.base[s], self.inputs[s])).float()
            check_class_indices(self.targets, scores.shape[1])
            probs = to_probabilities(scores, self.activation)
            self.calls, self.count = self.calls + 1, self.count + len(s)
            return probs.gather(1, self.targets[s].view(-1, 1)).squeeze(1).double()

        key = call_key(self.forward, tuple(self.inputs.shape[1:]), "without")
        with torch.no_grad():
            out = in_chunks(chunk, sample.shape[0], self.chunk, key=key)
        return torch.cat(out) if out else torch.empty(0, dtype=torch.float64, device=self.inputs.device)


def _exact(p: Removal, p0: Tensor, samples: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Exact (L, U) of ``samples``, all with the same feature count n: p of every subset, then the lattice paths."""
    n, t = int(valid[samples[0]].sum()), valid.shape[1]
    positions = valid[samples].nonzero()[:, 1].view(len(samples), n)  # (m, n) each sample's feature positions
    subsets = torch.arange(2**n, device=valid.device)
    bits = (subsets.view(-1, 1) >> torch.arange(n, device=valid.device)) & 1  # (2^n, n)
    removed = torch.zeros(len(samples), 2**n, t, dtype=torch.bool, device=valid.device)
    removed.scatter_(
        2, positions.unsqueeze(1).expand(-1, 2**n, -1), bits.bool().unsqueeze(0).expand(len(samples), -1, -1)
    )
    drop = p0[samples].view(-1, 1) - p(samples.repeat_interleave(2**n), removed.view(-1, t)).view(len(samples), 2**n)
    prev = subsets.view(-1, 1) & ~(1 << torch.arange(n, device=valid.device))  # (2^n, n) the subset without j
    has = bits.bool()
    size = bits.sum(dim=1)
    best = {}
    for sign in (1, -1):
        path = torch.zeros_like(drop)
        for k in range(1, n + 1):
            level = size == k
            before = path[:, prev[level]] * sign  # (m, |level|, n)
            before = before.masked_fill(~has[level].unsqueeze(0), -torch.inf)
            path[:, level] = drop[:, level] + sign * before.amax(dim=2)
        best[sign] = path[:, -1] / n
    return best[-1], best[1]


def _beam(p: Removal, p0: Tensor, samples: Tensor, valid: Tensor, beam_size: int, sign: int) -> Tensor:
    """The beam search's best AOPC (sign 1: the maximum, -1: the minimum) of ``samples``, batched over them."""
    m, t = len(samples), valid.shape[1]
    feats = valid[samples]  # (m, T)
    n = feats.sum(dim=1)
    sets = torch.zeros(m, 1, t, dtype=torch.bool, device=valid.device)  # (m, W, T) the kept orders' removed sets
    total = torch.zeros(m, 1, dtype=torch.float64, device=valid.device)
    for step in range(int(n.max())):
        live = n > step  # samples with features left
        cand = feats[:, None, :] & ~sets  # (m, W, T): feature j can extend order w
        cand &= live.view(-1, 1, 1)
        idx = cand.nonzero()  # (J, 3): sample, order, feature
        new = sets[idx[:, 0], idx[:, 1]].clone()
        new[torch.arange(len(idx)), idx[:, 2]] = True
        # orders that reach the same set share its model input (the authors' dedup)
        distinct, again = torch.unique(torch.cat([idx[:, :1], new.long()], dim=1), dim=0, return_inverse=True)
        drop = (p0[samples[distinct[:, 0]]] - p(samples[distinct[:, 0]], distinct[:, 1:].bool()))[again]
        score = torch.full((m, sets.shape[1] * t), -torch.inf, dtype=torch.float64, device=valid.device)
        flat = idx[:, 1] * t + idx[:, 2]
        score[idx[:, 0], flat] = sign * (total[idx[:, 0], idx[:, 1]] + drop)
        width = min(beam_size, int(cand.view(m, -1).sum(dim=1).max()))
        top, which = score.topk(width, dim=1)
        w, j = which // t, which % t
        nxt = sets.gather(1, w.unsqueeze(2).expand(-1, -1, t)).clone()
        nxt.scatter_(2, j.unsqueeze(2), True)
        keep = live.view(-1, 1) & torch.isfinite(top)  # finished samples and empty slots keep their orders
        old = torch.arange(width, device=valid.device).clamp(max=sets.shape[1] - 1).expand(m, -1)
        sets = torch.where(keep.unsqueeze(2), nxt, sets.gather(1, old.unsqueeze(2).expand(-1, -1, t)))
        total = torch.where(keep, sign * top, total.gather(1, old))
        total = torch.where(live.view(-1, 1) & ~keep, -sign * torch.inf, total)  # an empty slot never wins
    return (sign * total).amax(dim=1) * sign / n.double()


def aopc_bounds(
    forward: ForwardFn,
    inputs: Tensor,
    targets: Tensor,
    feature_mask: Tensor,
    *,
    baseline: float | int | Tensor,
    beam_size: int = 5,
    exact_max: int = 10,
    activation: str = "softmax",
    chunk_size: int = 256,
    features: Tensor | None = None,
) -> AopcBounds:
    """The lower and upper AOPC of each sample over every removal order of its features (see module docstring).

    Args:
        forward: ``forward(inputs) -> (n, K)`` logits.
        inputs: (B, T) token ids (or (B, *C, T): features on the last dim), or images (B, C, H, W) with ``features``.
        targets: (B,) explained classes.
        feature_mask: (B, F) bool, the features that can be removed (F = T, or the number of ``features``).
        baseline: what a removed feature becomes: a scalar or one tensor per sample (``inputs.shape``).
        beam_size: orders kept per step of the beam search (the authors' 5 for long inputs).
        exact_max: samples with at most this many features are solved exactly (2^n model inputs each).
        features: images: (H, W) long, each pixel's feature 0..F-1 (e.g. its grid cell), removed together.

    Example:
        >>> from faithbench.metrics.toy import additive_text_model
        >>> toy = additive_text_model()  # logit 0 = the sum of the kept tokens' weights 3, 1, 0, 2
        >>> from faithbench.metrics.aopc_bounds import aopc_bounds
        >>> mask = toy.feature_mask  # all four tokens may be removed
        >>> bounds = aopc_bounds(toy.forward, toy.inputs, toy.targets, mask, baseline=0.0, activation="identity")
        >>> bounds.upper, bounds.lower  # drops (3, 5, 6, 6) removing 3, 2, 1, 0; (0, 1, 3, 6) removing 0, 1, 2, 3
        (tensor([5.], dtype=torch.float64), tensor([2.5000], dtype=torch.float64))
        >>> bounds.exact
        tensor([True])
    """
    check_tensor(inputs, "inputs")
    check_positive_int(beam_size, "beam_size")
    check_choice(activation, "activation", ACTIVATIONS)
    b = inputs.shape[0]
    targets = check_targets(targets, b)
    f = inputs.shape[-1] if features is None else int(features.max()) + 1
    if feature_mask.shape != (b, f) or feature_mask.dtype != torch.bool:
        raise ValueError(f"feature_mask must be a bool tensor of shape {(b, f)}")
    n = feature_mask.sum(dim=1)
    if bool((n == 0).any()):
        raise ValueError(f"feature_mask selects no feature in samples {(n == 0).nonzero().flatten().tolist()}")
    p = Removal(forward, inputs, targets.to(inputs.device), baseline, activation, chunk_size, features)
    everyone = torch.arange(b, device=inputs.device)
    p0 = p(everyone, torch.zeros_like(feature_mask))
    lower, upper = torch.empty(b, dtype=torch.float64), torch.empty(b, dtype=torch.float64)
    lower, upper = lower.to(inputs.device), upper.to(inputs.device)
    exact = n <= exact_max
    for size in n[exact].unique().tolist():
        group = everyone[n == size]
        lower[group], upper[group] = _exact(p, p0, group, feature_mask)
    if bool((~exact).any()):
        group = everyone[~exact]
        upper[group] = _beam(p, p0, group, feature_mask, beam_size, 1)
        lower[group] = _beam(p, p0, group, feature_mask, beam_size, -1)
    return AopcBounds(lower=lower, upper=upper, exact=exact)
