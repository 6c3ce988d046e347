"""The per-draw ratios of the robustness family (:mod:`faithbench.metrics.robustness`, whose docstring has the
formulas): Lipschitz's map change per input change, Agarwal et al.'s relative changes and stabilities, and the
maximum over the draws that keep the prediction. Pure functions over (rows, ...) tensors, float64."""

from __future__ import annotations

import torch
from torch import Tensor


def _l2(rows: Tensor) -> Tensor:
    return torch.linalg.vector_norm(rows.reshape(rows.shape[0], -1).double(), dim=1)


def lipschitz_ratio(again: Tensor, maps: Tensor, perturbed: Tensor, inputs: Tensor) -> Tensor:
    """(R,) float64 ``|| again - maps ||_2 / || perturbed - inputs ||_2`` row by row (Alvarez-Melis & Jaakkola).

    >>> import torch
    >>> from faithbench.metrics.robustness import lipschitz_ratio
    >>> x, d = torch.ones(2, 2), torch.tensor([[0.1, 0.0], [0.0, -0.1]])
    >>> w = torch.tensor([1.0, 2.0])  # input x gradient of a linear model: a(x) = w * x
    >>> lipschitz_ratio(w * (x + d), w * x, x + d, x)
    tensor([1., 2.], dtype=torch.float64)
    """
    return _l2(again.double() - maps.double()) / _l2(perturbed.double() - inputs.double())


def relative_l2(new: Tensor, old: Tensor, eps_min: float = 1e-6) -> Tensor:
    """(R,) float64 ``|| (new - old) / old ||_2`` elementwise, ``old``'s zero entries replaced by ``eps_min``
    (Agarwal et al.'s percent change).

    >>> import torch
    >>> from faithbench.metrics.robustness import relative_l2
    >>> relative_l2(torch.tensor([[3.0, 1e-6]]), torch.tensor([[2.0, 0.0]]))  # |(0.5, 1)|
    tensor([1.1180], dtype=torch.float64)
    """
    old = old.double()
    return _l2((old - new.double()) / old.where(old != 0, eps_min))


def relative_stability(map_change: Tensor, other_change: Tensor, eps_min: float = 1e-6) -> Tensor:
    """(R,) RIS / ROS / RRS's ratio of a draw: the maps' relative change over ``max(other_change, eps_min)``.

    >>> import torch
    >>> from faithbench.metrics.robustness import relative_stability
    >>> relative_stability(torch.tensor([0.1, 0.3]), torch.tensor([0.1, 0.0]))  # the second floored at eps_min
    tensor([1.0000e+00, 3.0000e+05])
    """
    return map_change / other_change.clamp(min=eps_min)


def kept_max(ratios: Tensor, kept: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) the largest of (B, n) ``ratios`` over the draws ``kept`` and (B,) undefined where none is kept."""
    return ratios.where(kept, -torch.inf).max(dim=1).values.where(kept.any(dim=1), 0.0), ~kept.any(dim=1)
