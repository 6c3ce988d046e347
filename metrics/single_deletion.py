"""Single-deletion score (SDS; Hesse et al., "Benchmarking the Attribution Quality of Vision Models", NeurIPS 2024
Datasets and Benchmarks): does a map order an image's cells as deleting them one at a time does?

Each image x (C, H, W) is cut into g x g cells (pixel (i, j) lies in cell (floor(i g / H), floor(j g / W)): the
authors' equal cells where g divides the side). Every cell k is deleted once, alone (its pixels replaced by the
baseline b), and the explained class t's logit is read:

    drop_k = f_t(x) - f_t(x with cell k replaced by b),      A_k = sum_{p in cell k} a(p)

    score = Spearman rho(A, drop) over the g^2 cells        (ranks with ties averaged, as scipy.stats.spearmanr)

in [-1, 1], higher is better. ``single_deletion`` sums the signed map; ``single_deletion_absolute`` sums |a| (the
authors find signed maps score higher: a map's negative evidence is evidence too). Undefined (NaN, counted) where
A or drop is the same for every cell (a uniform map, a model blind to every cell).

A and drop are ranked at 16 significant bits (``rank_keys``, as the removal metrics order features): cell sums that
are equal in exact arithmetic (a GradCAM map's upsampled blocks) tie on every machine instead of being ordered by
whichever kernels summed them (measured: one such sample moved the smoke suite's mean by 0.0007 between an Intel and
an AMD CPU).

The authors fine-tune each model on cell-deleted images so that the deletions stay in-domain (IDSDS); on a model as
it is trained (here), the deletions are out of domain for it, as in pixel deletion: compare methods on one model,
and models only with that caveat.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from faithbench.calls import call_key, in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_finite, check_positive_int, check_tensor
from faithbench.metrics._perturb import check_class_indices, rank_keys
from faithbench.metrics.baselines import BaselineConfig, unit_baseline
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.truth_agreement import cell_sums, truth_correlation
from faithbench.metrics.types import Scores

ForwardFn = Callable[[Tensor], Tensor]


def cell_index(height: int, width: int, grid: int, device: torch.device | str = "cpu") -> Tensor:
    """(H, W) long: each pixel's cell, row-major, 0..grid^2-1 (rows floor(i grid / H), columns floor(j grid / W))."""
    if not 1 <= grid <= min(height, width):
        raise ValueError(f"grid must be between 1 and the image side ({min(height, width)} px), got {grid}")
    rows = torch.arange(height, device=device) * grid // height
    cols = torch.arange(width, device=device) * grid // width
    return rows.view(-1, 1) * grid + cols.view(1, -1)


def cell_drops(
    forward: ForwardFn,
    inputs: Tensor,
    targets: Tensor,
    *,
    grid: int = 4,
    baseline: Tensor | float = 0.0,
    chunk_size: int = 256,
) -> Tensor:
    """(B, grid^2) logit drops f_t(x) - f_t(x without cell k), every (image, cell) deletion and each original in
    calls of ``chunk_size`` inputs. ``baseline``: broadcastable to ``inputs`` (per sample or one for all).

    Example:
        >>> from faithbench.metrics.toy import linear_image_model
        >>> toy = linear_image_model()  # logit 0 = sum(w * x) = 120 with w = 0..15 on a 4 x 4 image of ones
        >>> from faithbench.metrics.single_deletion import cell_drops
        >>> cell_drops(toy.forward, toy.inputs, toy.targets, grid=2)  # zeroing each 2 x 2 cell, row-major
        tensor([[10., 18., 42., 50.]])
    """
    check_tensor(inputs, "inputs", min_dim=4, floating=True)
    check_positive_int(chunk_size, "chunk_size")
    b, _, h, w = inputs.shape
    cells = cell_index(h, w, grid, inputs.device)
    n = grid * grid + 1  # the cells, then the original
    base = torch.as_tensor(baseline, dtype=inputs.dtype, device=inputs.device).expand_as(inputs)

    def chunk(start: int, stop: int) -> Tensor:
        job = torch.arange(start, stop, device=inputs.device)
        s, k = job // n, job % n
        deleted = (cells.unsqueeze(0) == k.view(-1, 1, 1)).unsqueeze(1)  # k = grid^2 deletes nothing
        out = forward(torch.where(deleted, base[s], inputs[s]))
        if start == 0:
            if out.dim() != 2:
                raise ValueError(f"the model must return logits (n, classes), got shape {tuple(out.shape)}")
            check_class_indices(targets, out.shape[1])
        return out.gather(1, targets.to(out.device)[s.to(out.device)].view(-1, 1)).squeeze(1)

    key = call_key(forward, tuple(inputs.shape[1:]), "without")
    with torch.no_grad():
        read = torch.cat(in_chunks(chunk, b * n, chunk_size, key=key)).double().view(b, n)
    return (read[:, -1:] - read[:, :-1]).float()


def single_deletion(attributions: Tensor, drops: Tensor, *, grid: int = 4, absolute: bool = False) -> Scores:
    """Spearman's rho of each map's cell sums (of |a| with ``absolute``) and its cells' logit drops ``drops``
    (B, grid^2, from :func:`cell_drops`).

    Args:
        attributions: (B, H, W) maps.
        drops: (B, grid^2) logit drops, cells row-major.

    Example:
        >>> import torch
        >>> from faithbench.metrics.single_deletion import single_deletion
        >>> drops = torch.tensor([[10.0, 18.0, 42.0, 50.0]])
        >>> maps = torch.arange(16.0).reshape(1, 4, 4)  # cell sums 10, 18, 42, 50: the drops' order
        >>> single_deletion(maps, drops, grid=2).values, single_deletion(-maps, drops, grid=2).values
        (tensor([1.]), tensor([-1.]))
    """
    check_tensor(attributions, "attributions", min_dim=3, floating=True)
    check_finite(attributions, "attributions")
    b, h, w = attributions.shape
    if drops.shape != (b, grid * grid):
        raise ValueError(f"drops must be (B, grid^2) = ({b}, {grid * grid}), got {tuple(drops.shape)}")
    a = attributions.abs() if absolute else attributions
    sums = rank_keys(cell_sums(a, cell_index(h, w, grid, a.device)))
    # Spearman's rho, the drops in the truth's place; both at rank_keys' 16 significant bits (module docstring)
    return truth_correlation(sums, rank_keys(drops.to(a.device).double()))


@dataclass(frozen=True)
class SingleDeletionConfig(BaselineConfig):
    """``[single_deletion]``, shared by ``single_deletion`` and ``single_deletion_absolute`` (the cells' logit drops
    are computed once per unit). The authors delete to zeros in the model's normalised input (the data set's mean
    colour there): ``baseline = "mean"`` (the evaluation images' mean colour) or ``"model-input-zero"``."""

    grid: int = 4  # g: g x g cells

    protocols: ClassVar[dict[str, tuple]] = {"baseline": ("mean", "blur", "model-input-zero")}

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.grid, "grid")
        if self.grid < 2:
            raise ValueError(f"grid must be at least 2 (a rank correlation over grid^2 cells), got {self.grid}")


def _drops(unit: Unit, cfg: SingleDeletionConfig) -> Tensor:
    def compute() -> Tensor:
        x, t, ids = unit.samples()
        base = unit_baseline(unit, cfg, ids)
        return cell_drops(unit.forward, x, t, grid=cfg.grid, baseline=base, chunk_size=unit.eval_batch)

    return unit.memo(("single_deletion", cfg), compute)


def _evaluate(absolute: bool) -> Callable[[Unit, SingleDeletionConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: SingleDeletionConfig) -> MetricResult:
        _, _, ids = unit.samples()
        params = {**to_dict(cfg), "map": "absolute" if absolute else "signed", "readout": "logit"}
        if len(ids) == 0:
            return MetricResult.empty(params, "samples")
        scores = single_deletion(unit.sample_maps(), _drops(unit, cfg), grid=cfg.grid, absolute=absolute)
        return MetricResult(
            values=scores.values, undefined=scores.undefined, sample_ids=ids, params=params, explained="samples"
        )

    return evaluate


def cost(unit: Unit, cfg: SingleDeletionConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and, once for both metrics, every sample with each cell deleted and as it is."""
    n = len(unit.take(len(unit.sample_ids)))
    return (*sample_maps_cost(unit), MetricCost(("single_deletion", cfg), inputs=n * (cfg.grid**2 + 1)))


SIGNED = described("single_deletion", evaluate=_evaluate(absolute=False), cost=cost, config=SingleDeletionConfig)
ABSOLUTE = described(
    "single_deletion_absolute",
    evaluate=_evaluate(absolute=True),
    cost=cost,
    config=SingleDeletionConfig,
)
