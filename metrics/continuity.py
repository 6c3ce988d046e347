"""Continuity (Montavon et al. 2018, Digital Signal Processing, section 7.1; Quantus' ``Continuity``): an
explanation of a continuous model should not jump when its input moves a little. Each input ``x`` is translated by
``s_k`` pixels, ``x_k = T(x, s_k)``, and explained again for the same class; with the maps ``a`` prepared as Quantus
does (divided by their largest ``|entry|``, ``normalise``, then made positive, ``absolute``)::

    continuity = max_k || a(x_k) - a(x) ||_1 / || x_k - x ||_2          over the steps with x_k != x

Montavon et al.'s ``max_{x != x'}`` over a translation path (lower is more continuous). The translation moves the
input ``s_k`` pixels along its width (``direction = "x"``, right for s > 0, as Quantus and the paper's figure) or height
(``"y"``, down for s > 0), and fills the part it uncovers with ``fill``: ``black`` the input's own smallest value
(Quantus' ``black``), ``white`` its largest, ``mean`` its mean. The shifts are Quantus 0.6.0's for ``n_steps`` steps
over a side of ``W`` pixels::

    dx = (2 W + 1) // n_steps          s_k = -W + k dx,   k = 1 .. n_steps

(W = 28, n_steps = 28: -26, -24, ..., 28). The shift 0 (x_k = x) is not explained: its ratio has no denominator
(Quantus divides by 1e-9 and gets 0 there, the map being the same); neither is a step whose translated input equals
the input (a constant image) counted. A sample with no step left is undefined. A shift of ``W`` or more leaves only
the fill (Quantus raises for more than ``W``, which ``n_steps`` dividing ``2 W + 1`` gives).

Quantus 0.6.0 reduces to one number per sample itself (the maximum over its steps; earlier versions returned
per-patch sums of a grid of 7 px patches per step). ``space`` says what is translated, recorded on every row:
``model-input`` (default) what the model reads, after its encoding (Quantus' convention on the inputs you give it;
its ``black`` is then the encoded minimum), ``image`` the image in [0, 1], then the model's encoding reads it (every
model sees the same translated images; a B-cos model's [x, 1 - x] stays consistent). ``x`` in the denominator is what
was translated. Quantus divides each map by the largest ``|entry|`` of its whole call batch (``normalise_by_max``'s
default axes); here by its own. Its ``return_nan_when_prediction_changes`` (default false) is not offered: every step
counts, as in the paper.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.consistency import prepared
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.types import Scores

ExplainFn = Callable[[Tensor, Tensor], Tensor]
SPACES = ("model-input", "image")
FILLS = ("black", "white", "mean")
DIRECTIONS = ("x", "y")
QUANTUS_STEPS = 28  # Quantus' nr_steps


def translation_shifts(size: int, n_steps: int) -> list[int]:
    """Quantus' shifts for ``n_steps`` steps over a side of ``size`` pixels, the shift 0 left out (see the module
    docstring).

    >>> from faithbench.metrics.continuity import translation_shifts
    >>> translation_shifts(8, 4)  # dx = 17 // 4 = 4: -4, 0, 4, 8
    [-4, 4, 8]
    """
    check_positive_int(n_steps, "n_steps")
    check_positive_int(size, "size")
    if n_steps > 2 * size + 1:
        raise ValueError(f"n_steps must be at most 2 W + 1 = {2 * size + 1} for a side of W = {size} px, got {n_steps}")
    dx = (2 * size + 1) // n_steps
    return [s for s in (-size + k * dx for k in range(1, n_steps + 1)) if s != 0]


def fill_values(x: Tensor, fill: str = "black") -> Tensor:
    """(B,) what the translation fills in, per input (B, ...): its smallest value (``black``), largest (``white``) or
    mean (``mean``), over all its channels and pixels (Quantus' baselines)."""
    check_choice(fill, "fill", FILLS)
    flat = x.reshape(x.shape[0], -1)
    return {"black": flat.amin, "white": flat.amax, "mean": flat.mean}[fill](dim=1)


def translate(x: Tensor, shifts: Tensor, fill: Tensor, direction: str = "x") -> Tensor:
    """(B, c, H, W) ``x`` with row b moved ``shifts[b]`` pixels along its width (``x``: right for a positive shift) or
    height (``y``: down), the uncovered part set to ``fill[b]`` (all of it where ``|shift| >= `` the side).

    >>> import torch
    >>> from faithbench.metrics.continuity import translate
    >>> x = torch.tensor([[[[1.0, 2.0, 4.0]]]]).repeat(2, 1, 1, 1)
    >>> translate(x, torch.tensor([-1, 2]), torch.tensor([0.0, 9.0])).flatten(1)
    tensor([[2., 4., 0.],
            [9., 9., 1.]])
    """
    check_choice(direction, "direction", DIRECTIONS)
    if x.dim() != 4 or shifts.shape != (x.shape[0],) or fill.shape != (x.shape[0],):
        raise ValueError(f"x must be (B, c, H, W), shifts and fill (B,); got {tuple(x.shape)}, "
                         f"{tuple(shifts.shape)} and {tuple(fill.shape)}")  # fmt: skip
    axis = 3 if direction == "x" else 2
    size = x.shape[axis]
    source = torch.arange(size, device=x.device).view(1, -1) - shifts.to(x.device).long().view(-1, 1)  # (B, side)
    inside = (source >= 0) & (source < size)
    view = (-1, 1, 1, size) if direction == "x" else (-1, 1, size, 1)
    moved = x.gather(axis, source.clamp(0, size - 1).view(view).expand_as(x))
    return moved.where(inside.view(view), fill.to(x.dtype).view(-1, 1, 1, 1))


def continuity_ratios(
    maps: Tensor, again: Tensor, inputs: Tensor, moved: Tensor, *, normalise: bool = True, absolute: bool = True
) -> Tensor:
    """(R,) float64 ``|| a' - a ||_1 / || x' - x ||_2`` row by row, the maps ``a`` (``maps``) and ``a'`` (``again``)
    prepared (:func:`faithbench.metrics.consistency.prepared`); NaN where ``x' = x`` (``moved`` equals ``inputs``).

    >>> import torch
    >>> from faithbench.metrics.continuity import continuity_ratios
    >>> x, moved = torch.tensor([[1.0, 2.0, 4.0]]), torch.tensor([[2.0, 4.0, 1.0]])
    >>> continuity_ratios(x, moved, x, moved, normalise=False) ** 2  # the map is the input: (1 + 2 + 3)^2 / 14
    tensor([2.5714], dtype=torch.float64)
    """
    a = prepared(maps, normalise=normalise, absolute=absolute).double()
    b = prepared(again, normalise=normalise, absolute=absolute).double()
    step = torch.linalg.vector_norm((moved.double() - inputs.double()).reshape(len(moved), -1), dim=1)
    change = (b - a).abs().sum(dim=1)
    return (change / step.where(step > 0, 1.0)).where(step > 0, torch.nan)


def worst_step(ratios: Tensor) -> Scores:
    """(B,) the largest of (B, n) ``ratios`` over the steps that moved the input (not NaN); undefined where none did."""
    none = ratios.isnan().all(dim=1)
    return Scores(ratios.nan_to_num(nan=-torch.inf).amax(dim=1).where(~none, torch.nan), none)


def continuity(
    explain: ExplainFn,
    inputs: Tensor,
    targets: Tensor,
    *,
    n_steps: int = QUANTUS_STEPS,
    direction: str = "x",
    fill: str = "black",
    normalise: bool = True,
    absolute: bool = True,
    maps: Tensor | None = None,
) -> Scores:
    """Continuity of ``explain`` at ``inputs`` (B, c, H, W) for ``targets`` (B,): every sample translated at each of
    the ``n_steps`` shifts (the shift 0 left out), all ``B x steps`` translated inputs explained in one call
    (``explain`` batches them itself). ``maps``: ``explain(inputs, targets)`` when already computed. Lower is more
    continuous; 0 for a map that does not move.

    >>> import torch
    >>> from faithbench.metrics.continuity import continuity
    >>> fixed = lambda x, t: torch.ones(x.shape[0], *x.shape[2:])  # a map that ignores the input
    >>> continuity(fixed, torch.rand(2, 1, 6, 6), torch.tensor([0, 1]), n_steps=4).values
    tensor([0., 0.], dtype=torch.float64)
    """
    check_choice(direction, "direction", DIRECTIONS)
    b = inputs.shape[0]
    shifts = torch.tensor(translation_shifts(inputs.shape[3 if direction == "x" else 2], n_steps))
    m = len(shifts)
    base = explain(inputs, targets) if maps is None else maps
    rows = torch.arange(b * m)
    sample, step = rows // m, rows % m  # sample-major
    moved = translate(inputs[sample.to(inputs.device)], shifts[step], fill_values(inputs, fill)[sample], direction)
    again = explain(moved, targets[sample.to(targets.device)])
    ratios = continuity_ratios(base[sample.to(base.device)], again, inputs[sample.to(inputs.device)], moved,
                               normalise=normalise, absolute=absolute)  # fmt: skip
    return worst_step(ratios.view(b, m))


@dataclass(frozen=True)
class ContinuityConfig:
    """``[continuity]``: the suite's first ``max_samples`` samples (0: all), each translated at ``n_steps`` steps
    (Quantus' 28) along ``direction``, the uncovered part filled with ``fill``, in ``space``; the maps (of the label,
    as Quantus) divided by their largest |entry| (``normalise``) and made positive (``absolute``)."""

    n_steps: int = QUANTUS_STEPS
    direction: str = "x"
    fill: str = "black"
    space: str = "model-input"
    normalise: bool = True
    absolute: bool = True
    max_samples: int = 0

    def __post_init__(self) -> None:
        check_positive_int(self.n_steps, "n_steps")
        check_choice(self.direction, "direction", DIRECTIONS)
        check_choice(self.fill, "fill", FILLS)
        check_choice(self.space, "space", SPACES)
        for name in ("normalise", "absolute"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.max_samples, bool) or not isinstance(self.max_samples, int) or self.max_samples < 0:
            raise ValueError(f"max_samples must be an integer >= 0 (0: every sample), got {self.max_samples!r}")

    def for_image(self, side: int) -> ContinuityConfig:
        """The config on ``side`` px images, refused where ``n_steps`` would make a step of 0 px."""
        translation_shifts(side, self.n_steps)
        return self


def _side(size: tuple[int, ...], direction: str) -> int:
    return int(size[-1] if direction == "x" else size[-2])


def unit_ratios(unit: Unit, cfg: ContinuityConfig) -> Tensor:
    """(S, steps) the ratios of this piece's first ``max_samples`` samples: their (sample, step) rows translated and
    explained again, sample-major, ``explain_batch`` rows a call."""

    def compute() -> Tensor:
        x, labels, ids = unit.samples()
        first = unit.first_samples(cfg.max_samples).to(x.device)
        x, labels, ids = x[first], labels[first], ids[first.cpu()]
        base = unit.images[ids].to(unit.device) if cfg.space == "image" else x
        maps = unit.sample_maps()[first]
        shifts = torch.tensor(translation_shifts(_side(tuple(base.shape), cfg.direction), cfg.n_steps))
        fills, m = fill_values(base, cfg.fill), len(shifts)

        def rows(start: int, stop: int) -> Tensor:
            r = torch.arange(start, stop)
            sample = (r // m).to(unit.device)
            moved = translate(base[sample], shifts[r % m], fills[sample], cfg.direction)
            inputs = unit.model.encode(moved) if cfg.space == "image" else moved
            again = unit.explain(inputs, labels[sample], tag="continuity")
            return continuity_ratios(maps[sample], again, base[sample], moved, normalise=cfg.normalise,
                                     absolute=cfg.absolute)  # fmt: skip

        out = unit.timed_explanation("continuity", lambda: in_chunks(rows, len(ids) * m, unit.explain_batch))
        return torch.cat(out).view(len(ids), m) if out else x.new_zeros((0, m), dtype=torch.float64)

    return unit.memo(("continuity", cfg), compute)


def evaluate_continuity(unit: Unit, cfg: ContinuityConfig) -> MetricResult:
    """Per sample: the largest map change per input change over its translations."""
    _, _, ids = unit.samples()
    ids = ids[unit.first_samples(cfg.max_samples)]
    params = {**to_dict(cfg), "shifts": translation_shifts(_side(unit.model.input_size, cfg.direction), cfg.n_steps)}
    if len(ids) == 0:
        return MetricResult.empty(params, "continuity")
    scores = worst_step(unit_ratios(unit, cfg))
    return MetricResult(values=scores.values, undefined=scores.undefined, sample_ids=ids, params=params,
                        explained="continuity")  # fmt: skip


def cost(unit: Unit, cfg: ContinuityConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps and the first ``max_samples`` samples explained again at each shift but 0."""
    n, side = int(unit.first_samples(cfg.max_samples).sum()), _side(tuple(unit.model.input_size), cfg.direction)
    shifts = translation_shifts(side, cfg.n_steps)
    note = (f"a shift of {side} px or more leaves only the fill: samples of equal fill and class are then one input "
            "to a method that shares the forward pass of equal inputs in a call (the gradient family): counted each"
            if any(abs(s) >= side for s in shifts) else "")  # fmt: skip
    return (*sample_maps_cost(unit), MetricCost(("continuity", cfg), explanations=n * len(shifts), note=note))


CONTINUITY = described("continuity", evaluate=evaluate_continuity, cost=cost, config=ContinuityConfig)
