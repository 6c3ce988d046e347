"""The robustness family and infidelity in ``python -m bench perf``: faithbench's batched computation against Quantus'
per-draw loops and captum's ``sensitivity_max`` / ``infidelity``, on the same draws so that their values must agree
before a ratio counts (the conventions of ``tests/metrics/test_robustness.py`` and ``test_infidelity.py``).

Every quantity explains the case's images again with one method (``PerfSizes.robust_method``, input x gradient by
default): faithbench sends all ``n x B`` perturbed inputs to the method's batched path in one call; Quantus loops over
the ``n`` draws (one batch of its ``n_quantus`` images each); captum batches the draws itself. Draws are uniform of
radius ``robust_radius`` in model-input space; every draw is kept (Quantus' ``return_nan_when_prediction_changes`` is
off: a changed prediction would make its sample NaN there). The limit of a faithbench row is the method's own limit on
the ``n x B`` perturbed inputs (:func:`faithbench.bench.perf.limits.method_limit`): the passes no implementation of
the quantity avoids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from faithbench.metrics.infidelity import InfidelityConfig, infidelity, perturb_images, removed_fraction
from faithbench.metrics.robustness import (
    kept_max,
    lipschitz_ratio,
    relative_l2,
    relative_stability,
    sensitivities,
    uniform_noise,
)


@dataclass(frozen=True)
class Peer:
    """A peer's side of one quantity: ``peer`` (quantus or captum), its function, the images it runs on."""

    peer: str
    fn: Callable[[], Any]
    n_images: int


@dataclass(frozen=True)
class RobustQuantity:
    """One quantity: faithbench's function over all images, the inputs its limit explains, its peers, a note."""

    what: str
    faithbench: Callable[[], Tensor]
    limit_inputs: tuple[Tensor, Tensor]  # (inputs, targets) the limit explains
    peers: tuple[Peer, ...]
    note: str


def robust_quantities(
    explain: Callable[[Tensor, Tensor], Tensor],
    module: torch.nn.Module,
    inputs: Tensor,
    targets: Tensor,
    *,
    n_draws: int,
    radius: float,
    n_quantus: int,
    quantus: ModuleType | None,
    captum: bool,
    seed: int = 0,
) -> list[RobustQuantity]:
    """The robustness quantities of one model and method: ``explain(inputs, targets)`` gives (B, H, W) maps."""
    b, n = inputs.shape[0], n_draws
    nq = min(n_quantus, b)
    noise = uniform_noise((n, *inputs.shape), radius, torch.Generator().manual_seed(seed), inputs.device)
    maps = explain(inputs, targets)
    moved = (inputs.unsqueeze(0) + noise).reshape(n * b, *inputs.shape[1:])
    rows = (moved, targets.repeat(n))

    def again() -> Tensor:
        return explain(*rows)

    def sens(reduce: str) -> Callable[[], Tensor]:
        def run() -> Tensor:
            s, _ = sensitivities(explain, inputs, targets, maps, noise)
            return s.max(dim=1).values if reduce == "max" else s.mean(dim=1)

        return run

    def lipschitz() -> Tensor:
        ratios = lipschitz_ratio(again(), maps.repeat(n, 1, 1), moved, inputs.repeat(n, *[1] * (inputs.dim() - 1)))
        return kept_max(ratios.view(n, b).T, torch.ones(b, n, dtype=torch.bool, device=inputs.device))[0]

    def ris() -> Tensor:
        change = relative_l2(again(), maps.repeat(n, 1, 1))
        other = relative_l2(moved, inputs.repeat(n, *[1] * (inputs.dim() - 1)))
        ratios = relative_stability(change, other).view(n, b).T
        return kept_max(ratios, torch.ones(b, n, dtype=torch.bool, device=inputs.device))[0]

    x_q, y_q = inputs[:nq].detach().cpu().numpy(), targets[:nq].cpu().numpy()
    a_q = maps[:nq, None].detach().cpu().numpy()

    def quantus_run(kind: str, **kw: Any) -> Callable[[], object]:
        def run() -> object:
            draws = iter(noise[:, :nq].cpu().numpy().reshape(n, nq, -1))

            def perturb(arr: np.ndarray, indices: Any = None, **_: Any) -> np.ndarray:
                return arr + next(draws)

            def explain_func(model: Any, inputs: Any, targets: Any, **_: Any) -> np.ndarray:
                x = torch.as_tensor(inputs, device=maps.device).float()
                return explain(x, torch.as_tensor(targets, device=maps.device).long()).unsqueeze(1).cpu().numpy()

            metric = getattr(quantus, kind)(nr_samples=n, perturb_func=perturb, disable_warnings=True,
                                            display_progressbar=False, **kw)  # fmt: skip
            return metric(model=module, x_batch=x_q, y_batch=y_q, a_batch=a_q, explain_func=explain_func,
                          device=str(inputs.device), batch_size=nq)  # fmt: skip

        return run

    def captum_sensitivity() -> object:
        from captum.metrics import sensitivity_max

        def shared(expanded: Tensor) -> Tensor:  # captum repeats each input n times in a row
            return expanded + noise.transpose(0, 1).reshape(expanded.shape)

        def explanation_func(x: Tensor | tuple[Tensor, ...], target: Tensor) -> Tensor | tuple[Tensor, ...]:
            if isinstance(x, tuple):  # captum's first call passes a tuple and reads a tuple back
                return (explain(x[0], target),)
            return explain(x, target)

        return sensitivity_max(explanation_func, inputs, perturb_func=shared, n_perturb_samples=n, target=targets)

    keep = {"return_nan_when_prediction_changes": False}
    peers: dict[str, list[Peer]] = {k: [] for k in ("max", "avg", "lle", "ris")}
    if quantus is not None:
        peers["max"].append(Peer("quantus", quantus_run("MaxSensitivity", **keep), nq))
        peers["avg"].append(Peer("quantus", quantus_run("AvgSensitivity", **keep), nq))
        peers["lle"].append(Peer("quantus", quantus_run("LocalLipschitzEstimate", normalise=False, **keep), nq))
        peers["ris"].append(Peer("quantus", quantus_run("RelativeInputStability", **keep), nq))
    if captum:
        peers["max"].append(Peer("captum", captum_sensitivity, b))
    note = f"{n} draws of radius {radius} (model input), every draw kept"
    return [
        RobustQuantity("max_sensitivity", sens("max"), rows, tuple(peers["max"]), note),
        RobustQuantity("avg_sensitivity", sens("avg"), rows, tuple(peers["avg"]), note),
        RobustQuantity("local_lipschitz", lipschitz, rows, tuple(peers["lle"]), note),
        RobustQuantity("relative_input_stability", ris, rows, tuple(peers["ris"]), note),
    ]


def infidelity_quantity(
    module: torch.nn.Module,
    images: Tensor,
    encode: Callable[[Tensor], Tensor],
    maps: Tensor,
    targets: Tensor,
    *,
    n_perturbations: int,
    captum: bool,
    chunk_size: int,
) -> tuple[Callable[[], Tensor], list[Peer], Tensor, str]:
    """(faithbench's infidelity of ``maps`` under ``n_perturbations`` keyed squares to black, captum's peer (on the
    images, its forward the model's encoding then the model), the perturbed model inputs (the limit: the model on them
    alone), a note)."""
    b, n = images.shape[0], n_perturbations
    cfg = InfidelityConfig(n_perturbations=n, baseline="value", baseline_value=0.0)
    base = torch.zeros(1, images.shape[1], 1, 1, device=images.device)
    ids, draws = torch.arange(b).repeat_interleave(n), torch.arange(n).repeat(b)
    moved_images = perturb_images(images.repeat_interleave(n, 0), ids, draws, base, cfg)
    moved, x = encode(moved_images), encode(images)

    def logits(t: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.cat([module(t[s : s + chunk_size]) for s in range(0, len(t), chunk_size)])

    def ours() -> Tensor:
        f0 = logits(x).gather(1, targets.view(-1, 1))
        f = logits(moved).gather(1, targets.repeat_interleave(n).view(-1, 1)).view(b, n)
        fractions = removed_fraction(images.repeat_interleave(n, 0), moved_images, base).view(b, n, *maps.shape[1:])
        predicted = (fractions.double() * maps.double().unsqueeze(1)).sum(dim=(2, 3))
        return infidelity(predicted, (f0 - f).double())

    peers = []
    if captum:  # captum in image space: its forward encodes, its r is then the one here (the map spread over channels)
        from captum.metrics import infidelity as captum_infidelity
        from captum.metrics import infidelity_perturb_func_decorator

        @infidelity_perturb_func_decorator(True)
        def shared(inputs: Tensor, baselines: Tensor) -> Tensor:
            return moved_images

        spread = (maps.unsqueeze(1) / images.shape[1]).expand(-1, images.shape[1], -1, -1)

        def theirs() -> object:
            return captum_infidelity(
                lambda t: module(encode(t)),
                shared,
                images,
                spread,
                baselines=torch.zeros_like(images),
                target=targets,
                n_perturb_samples=n,
            )  # fmt: skip  (one batch: the shared draws are all rows)

        peers.append(Peer("captum", theirs, b))
    side = max(1, round(cfg.square_size * min(images.shape[-2:])))
    return ours, peers, moved, f"{n} squares of {side}px to black"
