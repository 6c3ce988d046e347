"""One forward pass for equal inputs explained for different targets (the cells of a GridPG grid).

GridPG explains every cell's class on the same grid image, so a batch of (input, target) pairs holds
each grid once per cell. For the gradient family the forward pass does not depend on the target: the
rows are deduplicated by content, the model runs once on the distinct inputs, and the backward pass
is taken once per *occurrence*: occurrence j seeds, for every distinct input that has a j-th row, the
logit of that row's target (a model's outputs for one input depend on that input alone, so one
backward serves every distinct input at once). ``T`` targets per input cost one forward of ``U``
inputs and ``T`` backward passes of ``U`` instead of ``T`` forwards and backwards of ``U``: the model
calls fall by the number of cells, the maps stay those of the per-row computation (up to float
rounding, tested).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def first_equal(rows: Tensor) -> Tensor:
    """(B,) for every row of ``rows`` (B, ...) the index of the first row with the same bits (itself if none)."""
    b = rows.shape[0]
    flat = rows.reshape(b, -1).contiguous()
    # An integer hash of the bits (exact arithmetic: equal rows always get equal keys), confirmed exactly.
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    bits = flat.view(as_int).long() if flat.is_floating_point() else flat.long()
    gen = torch.Generator().manual_seed(0)
    key = (bits * torch.randint(1, 2**31, (bits.shape[1],), generator=gen).to(bits.device)).sum(dim=1)
    first = (key.view(b, 1) == key.view(1, b)).int().argmax(dim=1)
    same = (flat == flat[first]).all(dim=1)
    return torch.where(same, first, torch.arange(b, device=rows.device))


def occurrences(inputs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(distinct, inverse, occurrence)`` of a batch: the rows that are first of their content (U,), each
    row's position among them (B,), and how many equal rows precede it (B,): row i is occurrence
    ``occurrence[i]`` of distinct input ``inverse[i]``."""
    first = first_equal(inputs)
    distinct = (first == torch.arange(len(first), device=first.device)).nonzero().flatten()
    position = torch.empty_like(first)
    position[distinct] = torch.arange(len(distinct), device=first.device)
    inverse = position[first]
    same = inverse.view(-1, 1) == inverse.view(1, -1)
    occurrence = torch.tril(same, diagonal=-1).sum(dim=1)
    return distinct, inverse, occurrence


def has_repeats(inputs: Tensor) -> bool:
    """Whether two rows of ``inputs`` are equal (then the shared forward pass saves model calls)."""
    return inputs.shape[0] > 1 and bool(
        (first_equal(inputs) != torch.arange(inputs.shape[0], device=inputs.device)).any()
    )


def grads_per_row(
    outputs: Tensor,
    wrt: Sequence[Tensor],
    inverse: Tensor,
    occurrence: Tensor,
    targets: Tensor,
    seed: Callable[[Tensor], Tensor] | None = None,
) -> list[Tensor]:
    """The gradients of every row's target logit with respect to ``wrt``, one backward pass per occurrence.

    ``outputs`` (U, K) are the model's outputs on the distinct inputs (or, for IntegratedGradients'
    steps, (S * U, K) with input u at rows ``s * U + u``); every tensor of ``wrt`` has the same leading
    dimension. ``seed(outputs) -> (U', K)`` is the initial gradient's value at the target (default 1;
    LRP starts from the logit minus the logit bias). Returns one (B, ...) tensor per ``wrt``: row i holds
    the gradient for target ``targets[i]`` of distinct input ``inverse[i]``, stacked over the steps: (S, B, ...).
    """
    n_distinct = int(inverse.max()) + 1
    steps = outputs.shape[0] // n_distinct
    value = None if seed is None else seed(outputs).detach()
    result = [w.new_zeros((steps, len(inverse), *w.shape[1:])) for w in wrt]
    last = int(occurrence.max())
    for j in range(last + 1):
        rows = (occurrence == j).nonzero().flatten()
        where = (torch.arange(steps, device=outputs.device).view(-1, 1) * n_distinct + inverse[rows]).flatten()
        classes = targets[rows].repeat(steps)
        grad_out = torch.zeros_like(outputs)
        grad_out[where, classes] = 1.0 if value is None else value[where, classes]
        grads = torch.autograd.grad(outputs, list(wrt), grad_outputs=grad_out, retain_graph=j < last)
        for out, grad in zip(result, grads, strict=True):
            g = grad.reshape(steps, n_distinct, *grad.shape[1:])
            out[:, rows] = g[:, inverse[rows]]
    return result
