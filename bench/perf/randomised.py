"""The randomisation tests in ``python -m bench perf``: eMPRT against Quantus 0.6.0's ``EfficientMPRT`` and sMPRT
against its ``SmoothMPRT``, on the same images, classes, randomised layers and (sMPRT) noise draws, so that their values
must agree before a ratio counts (the conventions of ``tests/metrics/test_sanity.py``).

faithbench runs the suite's path on a fresh unit of the case's batch (:func:`faithbench.bench.perf.peers.perf_unit`),
the perf's method (``PerfSizes.robust_method``) explaining, and its cascade (:mod:`faithbench.metrics.randomisation`:
the parameterised layers re-initialised from the top down with ``PerfSizes.randomisation_init``, seed 0, on a copy of
the model made in the timed call):

* ``emprt`` (:func:`emprt_quantity`): a cascade of one point (``n_depths`` 1: every layer re-initialised; in a suite
  eMPRT reads ``randomisation``'s cascade at its points), the trained model's maps and the fully randomised model's
  (both explained in the timed call), the rise of their 100-bin histogram entropy. Quantus' ``EfficientMPRT`` on its
  ``n_quantus`` images, its layer generator yielding faithbench's fully randomised model (:func:`forced_quantus`),
  given the trained maps as ``a_batch`` (outside its time, so that its preprocessing and its choice of bins do not
  explain them twice more; its loop explains them once, as faithbench); 100 bins (its default). It also predicts the
  classes on both models (its model-output entropies), its own work;
* ``smprt`` (:func:`smprt_quantity`): ``PerfSizes.smprt_depths`` points, every map (the trained model's and each
  point's) averaged over ``PerfSizes.smprt_noisy`` noisy copies of the images (noise 0.1 of each image's range, the
  last copy the image itself), the Spearman correlation of the |maps| at each point: the curve is compared. Quantus'
  ``SmoothMPRT`` (top down) on its images, its ``np.random.randn`` returning faithbench's keyed draws (in its float32
  scale, :func:`quantus_draws`: the same noisy inputs), ``quantus.explain`` (which it calls for every copy instead of
  ``explain_func``) the perf's method, its layer generator yielding the cascade's points. It is called as a user calls
  it (``a_batch`` None), so it smooths the trained model's maps twice, its own work: for its ``a_batch`` and for its
  ``"original"`` entry (their similarity, 1 with the same draws: compared too).

The limit (:func:`cascade_limit`): the method's limit on the batch (sMPRT: its B x N noisy copies) on the trained model,
then on each point's randomised model, whose layers it re-initialises in place first (on a copy made outside the time):
drawing the new weights is work no implementation avoids, copying the model is not.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from faithbench.bench.perf.cases import PerfSizes
from faithbench.bench.perf.limits import LIMITS, Limit, Work, forward_passes, method_limit
from faithbench.bench.perf.peers import perf_unit
from faithbench.bench.perf.perturbed import Peer
from faithbench.bench.perf.timing import Probe, replay
from faithbench.metrics.randomisation import RandomisationConfig, cascade_depths
from faithbench.metrics.sanity import SmoothMPRTConfig, evaluate_emprt, evaluate_smprt, noisy_copies
from faithbench.metrics.spec import MetricResult
from faithbench.models.adapter import ModelAdapter
from faithbench.models.randomise import parameter_layers, randomise_layer

SEED = 0  # the cascade's re-initialisation and sMPRT's draws
NOISE = 0.1  # sMPRT's noise_magnitude (faithbench's and Quantus' default)
_MISSING = object()


@dataclass(frozen=True)
class Randomised:
    """A randomisation test: faithbench's function over all images, its limit (from an untimed run's model calls), its
    peers, what of each side's result must agree, a note."""

    what: str
    faithbench: Callable[[], MetricResult]
    limit: Callable[[Probe], Limit | None]
    peers: tuple[Peer, ...]
    pair: Callable[[Any, Any], tuple[Tensor, np.ndarray]]  # (faithbench's result, the peer's) -> the values compared
    note: str


def cascade_points(module: nn.Module, n_depths: int) -> list[list[str]]:
    """The names of the layers each of the cascade's ``n_depths`` points re-initialises, in the order faithbench's
    cascade (:func:`faithbench.metrics.randomisation.cascade_maps`) does: top down."""
    names = [name for name, _ in parameter_layers(module)]
    n, points, done = len(names), [], 0
    for depth in cascade_depths(n, n_depths):
        points.append(list(reversed(names[n - depth : n - done])))
        done = depth
    return points


def randomise_points(module: nn.Module, points: list[list[str]], init: str, seed: int = SEED) -> Iterator[str]:
    """Re-initialise ``module``'s layers in place, point by point, as faithbench's cascade does (one generator seeded
    ``seed``, the same order); after each point, yield the name of its last layer."""
    layers = dict(parameter_layers(module))
    gen = torch.Generator().manual_seed(seed)
    for names in points:
        for name in names:
            randomise_layer(layers[name], init, gen)
        yield names[-1]


def module_explainer(
    adapter: ModelAdapter, method: Any, chunk_size: int, device: torch.device
) -> Callable[..., np.ndarray]:
    """Quantus' ``explain_func`` (and ``quantus.explain``): ``method``'s maps on the module it is given (the trained
    model or a randomised copy of it), with a channel axis, in NumPy."""

    def explain(model: nn.Module, inputs: Any, targets: Any, **_: Any) -> np.ndarray:
        on = adapter if model is adapter.module else dataclasses.replace(adapter, module=model)
        x, t = torch.as_tensor(inputs, device=device).float(), torch.as_tensor(targets, device=device).long()
        return method.attribute(on, x, t, max_batch=chunk_size).unsqueeze(1).detach().cpu().numpy()

    return explain


@contextlib.contextmanager
def forced_quantus(
    quantus: ModuleType,
    points: list[list[str]],
    init: str,
    seed: int = SEED,
    *,
    explain: Callable[..., np.ndarray] | None = None,
    draws: np.ndarray | None = None,
) -> Iterator[None]:
    """Quantus 0.6.0 computing on faithbench's randomised models and draws while the block runs (restored after):
    ``PyTorchModel``'s layer generator yields a copy of the model after each of the cascade's ``points`` (re-initialised
    by :func:`randomise_points` with ``seed``, not Quantus' own) and its length is their number; with ``explain``,
    ``quantus.explain`` (SmoothMPRT's call for every noisy copy) is it; with ``draws`` ((B, N - 1, ...):
    :func:`quantus_draws`), the k-th call of ``np.random.randn`` returns copy k mod (N - 1) of them (SmoothMPRT asks
    for the copies 0..N-2 of its batch, model after model)."""
    from quantus.helpers.model.pytorch_model import PyTorchModel

    def layers(self: Any, order: str = "top_down", **_: Any) -> Iterator[tuple[str, nn.Module]]:
        module = copy.deepcopy(self.model)  # Quantus' own seed (42) is not faithbench's cascade's: ``seed``
        for name in randomise_points(module, points, init, seed):
            yield name, module

    patches: list[tuple[Any, str, Any]] = [
        (PyTorchModel, "get_random_layer_generator", layers),
        (PyTorchModel, "random_layer_generator_length", property(lambda self: len(points))),
    ]
    if explain is not None:
        patches.append((quantus, "explain", explain))
    if draws is not None:
        calls = [0]

        def randn(*shape: int) -> np.ndarray:
            copy_k = draws[:, calls[0] % draws.shape[1]]
            calls[0] += 1
            if tuple(shape) != copy_k.shape:
                raise ValueError(f"Quantus drew noise of shape {shape}, the draws are {copy_k.shape}")
            return copy_k

        patches.append((np.random, "randn", randn))
    saved = [(owner, name, vars(owner).get(name, _MISSING)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def cascade_limit(
    adapter: ModelAdapter,
    method: Any,
    chunk_size: int,
    batch: tuple[Tensor, Tensor],
    points: list[list[str]],
    init: str,
    seed: int,
    first: Probe,
) -> Limit | None:
    """The method's limit on ``batch`` (inputs, targets) on the trained model, then on each point's randomised model,
    its layers re-initialised in place first (on a copy made here, outside the time); a method whose limit replays its
    model calls replays those of the metric's whole run (``first``) and re-initialises the layers."""
    module = copy.deepcopy(adapter.module)
    n_layers = sum(len(p) for p in points)
    states = (f"the trained model, then {len(points)} randomised state(s) ({n_layers} layers re-initialised in place, "
              f"{init}: the weight draws included; the model copy, made outside the time, not)")  # fmt: skip
    if LIMITS.get(method.name) is forward_passes:
        forwards = replay(adapter.module, first.inputs)

        def replayed() -> None:
            forwards()
            for _ in randomise_points(module, points, init, seed):
                pass

        return Limit(replayed, f"its {len(first.inputs)} model call(s) alone, no_grad, on {states}")
    trained = method_limit(Work(adapter, method, *batch, chunk_size, ()))
    randomised = method_limit(Work(dataclasses.replace(adapter, module=module), method, *batch, chunk_size, ()))
    if trained is None or randomised is None:
        return None

    def run() -> None:
        trained.run()
        for _ in randomise_points(module, points, init, seed):
            randomised.run()

    return Limit(run, f"{trained.note} on {states}")


def emprt_quantity(
    adapter: ModelAdapter,
    method: Any,
    images: Tensor,
    inputs: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    sizes: PerfSizes,
    quantus: ModuleType | None,
    seed: int = SEED,
) -> Randomised:
    """eMPRT of ``method`` at ``inputs`` (``images`` encoded) for ``targets``; ``maps``: its maps of them (Quantus'
    ``a_batch``); ``seed``: the cascade's."""
    b, nq, init = inputs.shape[0], min(sizes.n_quantus, inputs.shape[0]), sizes.randomisation_init
    cfg = RandomisationConfig(n_samples=b, n_depths=1, init=init, seed=seed)
    points = cascade_points(adapter.module, 1)

    def ours() -> MetricResult:
        return evaluate_emprt(perf_unit(adapter, method, images, inputs, targets, sizes.chunk_size), cfg)

    peers = []
    if quantus is not None:
        x_q, y_q, a_q = (inputs[:nq].cpu().numpy(), targets[:nq].cpu().numpy(), maps[:nq, None].cpu().numpy())
        explain = module_explainer(adapter, method, sizes.chunk_size, inputs.device)

        def theirs() -> object:
            metric = quantus.EfficientMPRT(layer_order="top_down", disable_warnings=True, display_progressbar=False)
            with forced_quantus(quantus, points, init, seed):
                return metric(model=adapter.module, x_batch=x_q, y_batch=y_q, a_batch=a_q, explain_func=explain,
                              device=str(inputs.device), batch_size=nq)  # fmt: skip

        peers.append(Peer("quantus", theirs, nq))

    def pair(ours_result: MetricResult, theirs_result: Any) -> tuple[Tensor, np.ndarray]:
        return ours_result.values[:nq], np.asarray(theirs_result, dtype=float)

    limit = partial(cascade_limit, adapter, method, sizes.chunk_size, (inputs, targets), points, init, seed)
    note = (f"the trained model and one cascade point: all {len(points[0])} layers re-initialised ({init}); 100 bins; "
            "Quantus' layer generator yields the same model")  # fmt: skip
    return Randomised("emprt", ours, limit, tuple(peers), pair, note)


def quantus_draws(x_q: np.ndarray, inputs: Tensor, n_noisy: int, seed: int) -> np.ndarray:
    """(B, N - 1, ...) float64: what SmoothMPRT's ``np.random.randn`` must return for its noisy copies of ``x_q``
    (``inputs`` in NumPy) to be faithbench's (:func:`faithbench.metrics.sanity.noisy_copies`), the same float32 values.
    Quantus scales its draws by ``noise_magnitude`` times the image's range computed in float32, faithbench in float64,
    and one input rounded to another float32 moves a ReLU network's gradient (at 224 px: Spearman 8e-5 apart): so these
    are faithbench's keyed normal draws expressed in Quantus' float32 scale (equal to them within ~1e-7)."""
    ids = torch.arange(inputs.shape[0])
    copies = noisy_copies(inputs, ids, n_noisy=n_noisy, magnitude=NOISE, seed=seed)[:, :-1].cpu().double().numpy()
    dims = tuple(range(1, x_q.ndim))
    std = NOISE * (x_q.max(axis=dims, keepdims=True) - x_q.min(axis=dims, keepdims=True))  # Quantus' own expression
    std = std.astype(np.float64)[:, None]
    offsets = copies - x_q.astype(np.float64)[:, None]
    return np.where(std > 0, offsets / np.where(std > 0, std, 1.0), 0.0)


def smprt_quantity(
    adapter: ModelAdapter,
    method: Any,
    images: Tensor,
    inputs: Tensor,
    targets: Tensor,
    *,
    sizes: PerfSizes,
    quantus: ModuleType | None,
    seed: int = SEED,
) -> Randomised:
    """sMPRT of ``method`` at ``inputs`` (``images`` encoded) for ``targets``: ``smprt_depths`` cascade points,
    ``smprt_noisy`` copies per image; ``seed``: the cascade's and the noise's."""
    b, nq, init, n = inputs.shape[0], min(sizes.n_quantus, inputs.shape[0]), sizes.randomisation_init, sizes.smprt_noisy
    cfg = SmoothMPRTConfig(n_samples=b, n_depths=sizes.smprt_depths, init=init, seed=seed, n_noisy=n,
                           noise_magnitude=NOISE)  # fmt: skip
    points = cascade_points(adapter.module, sizes.smprt_depths)
    ids = torch.arange(b)
    copies = noisy_copies(inputs, ids, n_noisy=n, magnitude=NOISE, seed=seed).flatten(0, 1)  # (B N, ...) sample-major

    def ours() -> MetricResult:
        return evaluate_smprt(perf_unit(adapter, method, images, inputs, targets, sizes.chunk_size), cfg)

    peers = []
    if quantus is not None:
        x_q, y_q = inputs[:nq].cpu().numpy(), targets[:nq].cpu().numpy()
        explain = module_explainer(adapter, method, sizes.chunk_size, inputs.device)
        draws = quantus_draws(x_q, inputs[:nq], n, seed) if n > 1 else None

        def theirs() -> object:
            metric = quantus.SmoothMPRT(layer_order="top_down", nr_samples=n, noise_magnitude=NOISE,
                                        disable_warnings=True, display_progressbar=False)  # fmt: skip
            with forced_quantus(quantus, points, init, seed, explain=explain, draws=draws):
                return metric(model=adapter.module, x_batch=x_q, y_batch=y_q, a_batch=None, explain_func=explain,
                              device=str(inputs.device), batch_size=nq)  # fmt: skip

        peers.append(Peer("quantus", theirs, nq))

    def pair(ours_result: MetricResult, theirs_result: Any) -> tuple[Tensor, np.ndarray]:
        ones = torch.ones(nq, 1, dtype=torch.float64)
        curve = torch.cat([ones, ours_result.curve[:nq].double().cpu()], dim=1)  # the trained model's with itself: 1
        scores = dict(theirs_result)
        columns = [scores.pop("original"), *scores.values()]
        return curve, np.stack([np.asarray(c, dtype=float) for c in columns], axis=1)

    limit = partial(cascade_limit, adapter, method, sizes.chunk_size, (copies, targets.repeat_interleave(n)), points,
                    init, seed)  # fmt: skip
    note = (f"{len(points)} cascade points of {sum(map(len, points))} layers ({init}), {n} noisy copies (noise "
            f"{NOISE} of the range), Spearman; Quantus given the same layers and draws, its a_batch None")  # fmt: skip
    return Randomised("smprt", ours, limit, tuple(peers), pair, note)


def randomisation_tests(
    adapter: ModelAdapter,
    method: Any,
    images: Tensor,
    inputs: Tensor,
    targets: Tensor,
    maps: Tensor,
    *,
    sizes: PerfSizes,
    quantus: ModuleType | None,
) -> list[Randomised]:
    """eMPRT and sMPRT of one case (``maps``: ``method``'s maps of ``inputs``)."""
    return [
        emprt_quantity(adapter, method, images, inputs, targets, maps, sizes=sizes, quantus=quantus),
        smprt_quantity(adapter, method, images, inputs, targets, sizes=sizes, quantus=quantus),
    ]
