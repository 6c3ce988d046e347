"""Robustness of an explanation to small changes of its input, batched: every perturbed copy of every sample
explained in the method's own batched calls, one set of draws per unit for the whole family.

For inputs ``x`` with maps ``a(x)`` and ``n`` draws ``d_k`` (uniform in the L-infinity ball of radius ``r``, or
Gaussian with standard deviation ``r``), ``x_k = x + d_k``, logits ``h`` and a representation ``L`` (the input of the
model's last parameterised layer)::

    s_k = || a(x_k) - a(x) || / || a(x) ||             (Frobenius norm of the flattened map by default)
    max_sensitivity = max_k s_k      avg_sensitivity = mean_k s_k      (Yeh et al., NeurIPS 2019)
    local_lipschitz = max_k || a(x_k) - a(x) ||_2 / || x_k - x ||_2      (Alvarez-Melis & Jaakkola 2018)
    rel(u, v) = || (u - v) / v ||_2 elementwise, v's zero entries replaced by eps_min
    relative_input_stability = max_k rel(a(x_k), a(x)) / max(rel(x_k, x), eps_min)          (Agarwal et al. 2022)
    relative_output_stability = max_k rel(a(x_k), a(x)) / max(|| h(x_k) - h(x) ||_2, eps_min)
    relative_representation_stability = max_k rel(a(x_k), a(x)) / max(rel(L(x_k), L(x)), eps_min)

Lipschitz and the relative stabilities take their maximum over the draws that keep the model's predicted class, as
their papers do (``keep_prediction``); a sample whose every draw changes it is undefined. Sensitivity takes every draw
(Yeh et al.), and a sample whose map is 0 everywhere has no denominator: undefined (captum divides by 1 there,
Quantus by 0). Lower is more robust for all six.

captum's ``sensitivity_max`` and Quantus' ``MaxSensitivity``, ``AvgSensitivity``, ``LocalLipschitzEstimate``
(``normalise=False``), ``RelativeInputStability``, ``RelativeOutputStability`` and
``RelativeRepresentationStability`` compute the same quantities; given the same draws they agree to float rounding
(tests). Quantus' relative stabilities take ``np.max`` over draws with NaN for changed predictions, so one changed
prediction makes its sample NaN; here the maximum is over the kept draws.

In a suite (``[robustness]``, shared by the six: one set of re-explanations per unit) the draws are a function of the
seed and the sample's id (the same on every device, piece and batch), and ``space`` says where they land, recorded on
every row: ``model-input`` (default) perturbs what the model reads, in its units, after its encoding (captum's and
Quantus' convention on the inputs you give them); ``image`` perturbs the image in [0, 1], then the model's encoding
reads it (every model sees the same perturbed images whatever it reads, so models with different encodings compare:
a B-cos model's [x, 1 - x] stays consistent). ``x`` in Lipschitz and RIS is what the noise was added to. Nothing is
clipped to [0, 1], as in both peers.

Text models read embeddings (B, D, T): the noise lands on them (``space = "model-input"``, the only space for text) at
the real token positions only (an all-zero position is padding, which must stay padding), in the embedding layer's
units, and the maps compare over the tokens without [CLS] / [SEP] (every text metric's features; rows record
``noise_on``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from faithbench.calls import in_chunks
from faithbench.config import to_dict
from faithbench.metrics._checks import check_choice, check_positive_int
from faithbench.metrics.imputation import hashed_normal, hashed_uniform
from faithbench.metrics.spec import MetricCost, MetricResult, Unit, sample_maps_cost
from faithbench.metrics.spec_table import described
from faithbench.metrics.stability_ratios import _l2, kept_max, lipschitz_ratio, relative_l2, relative_stability
from faithbench.metrics.types import Scores
from faithbench.models.randomise import parameter_layers

ExplainFn = Callable[[Tensor, Tensor], Tensor]
STREAM_ROBUSTNESS = 3  # the draws' stream of the keyed uniforms (metrics.imputation: 1 and 2 are taken)
SPACES = ("image", "model-input")
NORMS = ("fro", "inf")  # sensitivity's, of the flattened maps: Frobenius (the peers' default), or the largest entry
NOISES = ("uniform", "gaussian")
PRESETS = {"captum": (0.02, 10), "quantus": (0.2, 200)}  # (radius, draws): sensitivity_max's and MaxSensitivity's


def uniform_noise(shape: tuple[int, ...], radius: float, generator: torch.Generator, device: torch.device) -> Tensor:
    """Draws uniform in [-radius, radius] of ``shape`` (from ``generator``, on the CPU, then moved: the same draws on
    every device)."""
    return ((torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * radius).float().to(device)


def sensitivities(
    explain: ExplainFn,
    inputs: Tensor,
    targets: Tensor,
    maps: Tensor,
    noise: Tensor,
    *,
    norm: str = "fro",
    perturb: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """(B, n) relative map changes ``s_k`` (formula in the module docstring) and (B,) undefined where ``maps`` is 0
    everywhere. ``noise``: (n, B, *inputs' shape[1:]) the draws ``d_k``; ``perturb(inputs, d)``: how a draw changes
    the inputs (default ``inputs + d``; e.g. noise in pixel space, then the model's encoding). All ``n x B`` perturbed
    inputs go to ``explain`` in one call (it batches them itself).

    >>> import torch
    >>> from faithbench.metrics.robustness import sensitivities
    >>> x, t = torch.ones(1, 2), torch.tensor([0])
    >>> explain = lambda inputs, targets: torch.tensor([1.0, 2.0]) * inputs  # input x gradient, f(x) = x1 + 2 x2
    >>> s, undefined = sensitivities(explain, x, t, explain(x, t), torch.tensor([[[0.1, 0.0]], [[0.0, -0.1]]]))
    >>> (s * 5**0.5).round(decimals=4), undefined
    (tensor([[0.1000, 0.2000]], dtype=torch.float64), tensor([False]))
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    n, b = noise.shape[:2]
    if noise.shape[1:] != inputs.shape or maps.shape[0] != b or targets.shape != (b,):
        raise ValueError(
            f"noise (n, B, ...) {tuple(noise.shape)}, inputs {tuple(inputs.shape)}, maps {tuple(maps.shape)} and "
            f"targets {tuple(targets.shape)} disagree"
        )
    perturbed = (perturb or torch.add)(inputs.unsqueeze(0).expand(n, *inputs.shape).reshape(n * b, *inputs.shape[1:]),
                                       noise.reshape(n * b, *inputs.shape[1:]))  # fmt: skip
    again = explain(perturbed, targets.repeat(n))
    change = relative_change(again, maps.repeat(n, *[1] * (maps.dim() - 1)), norm).view(n, b)
    return change.T, _size(maps, norm) == 0


def _size(maps: Tensor, norm: str) -> Tensor:
    return torch.linalg.vector_norm(maps.reshape(maps.shape[0], -1).double(), ord=2 if norm == "fro" else float("inf"),
                                    dim=1)  # fmt: skip


def relative_change(again: Tensor, maps: Tensor, norm: str = "fro") -> Tensor:
    """(R,) float64 ``|| again - maps || / || maps ||`` row by row (0 where ``maps`` is 0 everywhere: undefined)."""
    size = _size(maps, norm)
    return _size(again.double() - maps.double(), norm) / size.where(size > 0, 1.0)


def max_avg_sensitivity(
    explain: ExplainFn,
    inputs: Tensor,
    targets: Tensor,
    *,
    radius: float = 0.02,
    n_draws: int = 10,
    norm: str = "fro",
    generator: torch.Generator | None = None,
    maps: Tensor | None = None,
) -> tuple[Scores, Scores]:
    """Max-Sensitivity and Avg-Sensitivity of ``explain`` at ``inputs`` (B, ...) for ``targets`` (B,): ``n_draws``
    uniform draws of radius ``radius`` per sample (from ``generator``, default seed 0), each perturbed input explained
    again. ``maps``: ``explain(inputs, targets)`` when already computed. Lower is more robust; 0 for a map that does
    not change.

    >>> import torch
    >>> from faithbench.metrics.robustness import max_avg_sensitivity
    >>> fixed = lambda inputs, targets: torch.ones_like(inputs)  # a map that ignores the input
    >>> most, mean = max_avg_sensitivity(fixed, torch.rand(2, 4), torch.tensor([0, 1]))
    >>> most.values, mean.values
    (tensor([0., 0.], dtype=torch.float64), tensor([0., 0.], dtype=torch.float64))
    """
    check_positive_int(n_draws, "n_draws")
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius!r}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    base = explain(inputs, targets) if maps is None else maps
    noise = uniform_noise((n_draws, *inputs.shape), radius, gen, inputs.device)
    s, undefined = sensitivities(explain, inputs, targets, base, noise, norm=norm)
    return Scores(s.max(dim=1).values, undefined), Scores(s.mean(dim=1), undefined)


@dataclass(frozen=True)
class RobustnessConfig:
    """``[robustness]``: ``n_draws`` draws (captum's ``n_perturb_samples``, Quantus' ``nr_samples``) of ``noise`` at
    scale ``radius`` per sample, both by default those of ``preset`` (``captum``: 10 of 0.02; ``quantus``: 200 of 0.2,
    ``MaxSensitivity``'s), for the suite's first ``max_samples`` samples (0: all), in ``space``; sensitivity's map
    change in ``norm``; Lipschitz and RIS / ROS / RRS over the draws that keep the prediction (``keep_prediction``),
    ``eps_min`` their floor; the draws keyed by ``seed``. The rows record the radius and draws used."""

    preset: str = "captum"
    radius: float | None = None
    n_draws: int | None = None
    noise: str = "uniform"
    max_samples: int = 0
    norm: str = "fro"
    space: str = "model-input"
    keep_prediction: bool = True
    eps_min: float = 1e-6
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.preset, "preset", tuple(PRESETS))
        radius, n_draws = PRESETS[self.preset]
        object.__setattr__(self, "radius", radius if self.radius is None else self.radius)
        object.__setattr__(self, "n_draws", n_draws if self.n_draws is None else self.n_draws)
        for name in ("radius", "eps_min"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        check_positive_int(self.n_draws, "n_draws")
        if isinstance(self.max_samples, bool) or not isinstance(self.max_samples, int) or self.max_samples < 0:
            raise ValueError(f"max_samples must be an integer >= 0 (0: every sample), got {self.max_samples!r}")
        check_choice(self.noise, "noise", NOISES)
        check_choice(self.norm, "norm", NORMS)
        check_choice(self.space, "space", SPACES)
        if not isinstance(self.keep_prediction, bool):
            raise ValueError(f"keep_prediction must be true or false, got {self.keep_prediction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


def keyed_noise(ids: Tensor, shape: tuple[int, ...], cfg: RobustnessConfig, device: torch.device) -> Tensor:
    """(n_draws, len(ids), *shape) draws (uniform in [-radius, radius], or Gaussian of standard deviation radius), a
    function of (seed, sample id, draw, element): the same whatever the pieces, batches or device."""
    size, kw = (cfg.n_draws, *shape), {"seed": cfg.seed, "stream": STREAM_ROBUSTNESS}
    unit_noise = (
        hashed_uniform(ids.cpu(), size, **kw) * 2 - 1
        if cfg.noise == "uniform"
        else hashed_normal(ids.cpu(), size, **kw)
    )
    return (unit_noise * cfg.radius).float().transpose(0, 1).to(device)


@dataclass(frozen=True)
class Draws:
    """Per (sample, draw), (S, n) each: sensitivity's relative map change, Lipschitz's ratio, the maps' relative
    change (RIS / ROS / RRS's numerator), the input's, the logits' and the representation's changes, and whether the
    draw kept the predicted class; (S,) whether the sample's map is 0 everywhere."""

    sensitivity: Tensor
    lipschitz: Tensor
    map_relative: Tensor
    input_relative: Tensor
    output_change: Tensor
    representation_relative: Tensor
    kept: Tensor
    zero_map: Tensor


def _forward(module: torch.nn.Module, inputs: Tensor) -> tuple[Tensor, Tensor]:
    """(logits, the input of the last parameterised layer) of ``inputs``, without gradients."""
    seen: list[Tensor] = []
    _, last = parameter_layers(module)[-1]
    hook = last.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            logits = module(inputs)
    finally:
        hook.remove()
    if not seen:
        raise RuntimeError("relative_representation_stability: the model's last parameterised layer was not called")
    return logits.detach(), seen[-1]


def _selected(unit: Unit, cfg: RobustnessConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(where the noise lands, encoded inputs, labels, ids) of this piece's samples among the first ``max_samples``."""
    if cfg.space == "image" and unit.model.modality == "text":
        raise ValueError(
            "[robustness] space = 'image' needs image models; a text model's noise lands on its embeddings "
            "(space = 'model-input')"
        )
    x, labels, ids = unit.samples()
    first = unit.first_samples(cfg.max_samples)
    x, labels, ids = x[first.to(x.device)], labels[first.to(x.device)], ids[first]
    base = unit.images[ids].to(unit.device) if cfg.space == "image" else x
    return base, x, labels, ids


def real_positions(unit: Unit, inputs: Tensor) -> Tensor | None:
    """(S, 1, T) bool: a text model's real token positions (its all-zero embeddings are padding, which noise must
    leave all-zero, or they would stop being padding); None for images (every entry takes noise)."""
    return (inputs != 0).any(dim=1, keepdim=True) if unit.model.modality == "text" else None


def _perturbed(
    unit: Unit, cfg: RobustnessConfig, base: Tensor, ids: Tensor, start: int, stop: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(sample index, what the noise landed on, what the model reads) of (sample, draw) rows start..stop."""
    n = cfg.n_draws
    r = torch.arange(start, stop, device=unit.device)
    first = start // n
    noise = keyed_noise(ids[first : (stop - 1) // n + 1], tuple(base.shape[1:]), cfg, unit.device)  # (n, k, ...)
    sample = r // n
    draws = noise[r % n, sample - first]
    real = real_positions(unit, base)
    moved = base[sample] + (draws if real is None else draws * real[sample])
    return sample, moved, unit.model.encode(moved) if cfg.space == "image" else moved


def model_changes(unit: Unit, cfg: RobustnessConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(S, n) the input's relative change, the logits' change, the representation's relative change and whether the
    prediction is kept, per (sample, draw): one forward of the samples and of every perturbed copy, ``eval_batch``
    a call, shared by the model's units (the draws do not depend on the method)."""

    def compute() -> tuple[Tensor, Tensor, Tensor, Tensor]:
        base, x, _, ids = _selected(unit, cfg)
        module, n = unit.model.module, cfg.n_draws
        key = (unit.model.name, "robustness", tuple(x.shape[1:]), "without gradients")
        originals = in_chunks(lambda s, e: _forward(module, x[s:e]), len(x), unit.eval_batch, key=key)
        logits = torch.cat([o[0] for o in originals]) if originals else x.new_zeros((0, 1))
        rep = torch.cat([o[1] for o in originals]) if originals else x.new_zeros((0, 1))

        def rows(start: int, stop: int) -> Tensor:
            sample, moved, inputs = _perturbed(unit, cfg, base, ids, start, stop)
            h, r = _forward(module, inputs)
            return torch.stack([relative_l2(moved, base[sample], cfg.eps_min), _l2(h - logits[sample]),
                                relative_l2(r, rep[sample], cfg.eps_min),
                                (h.argmax(dim=1) == logits[sample].argmax(dim=1)).double()], dim=1)  # fmt: skip

        out = in_chunks(rows, len(ids) * n, unit.eval_batch, key=key)
        table = torch.cat(out).view(len(ids), n, 4) if out else x.new_zeros((0, n, 4), dtype=torch.float64)
        return table[..., 0], table[..., 1], table[..., 2], table[..., 3] > 0.5

    return unit.per_model(("robustness", cfg), compute)


def unit_draws(unit: Unit, cfg: RobustnessConfig) -> Draws:
    """The family's per-(sample, draw) quantities of this unit, once for its six metrics: the samples' maps, then
    their (sample, draw) rows explained again, ``explain_batch`` rows a call."""

    def compute() -> Draws:
        base, x, targets, ids = _selected(unit, cfg)
        first = unit.first_samples(cfg.max_samples).to(x.device)
        maps, features = unit.sample_maps()[first], unit.sample_feature_mask()
        features = None if features is None else features[first].to(maps.dtype)
        maps = maps if features is None else maps * features  # text: its tokens, not [CLS] / [SEP]
        n = cfg.n_draws

        def rows(start: int, stop: int) -> Tensor:  # (sample, draw) rows start..stop, sample-major
            sample, moved, inputs = _perturbed(unit, cfg, base, ids, start, stop)
            again = unit.explain(inputs, targets[sample], tag="robustness")
            again = again if features is None else again * features[sample]
            return torch.stack([relative_change(again, maps[sample], cfg.norm),
                                lipschitz_ratio(again, maps[sample], moved, base[sample]),
                                relative_l2(again, maps[sample], cfg.eps_min)], dim=1)  # fmt: skip

        out = unit.timed_explanation("robustness", lambda: in_chunks(rows, len(ids) * n, unit.explain_batch))
        table = torch.cat(out).view(len(ids), n, 3) if out else x.new_zeros((0, n, 3), dtype=torch.float64)
        input_rel, output, representation, kept = model_changes(unit, cfg)
        kept = kept if cfg.keep_prediction else torch.ones_like(kept)
        return Draws(table[..., 0], table[..., 1], table[..., 2], input_rel, output, representation, kept,
                     _size(maps, cfg.norm) == 0)  # fmt: skip

    return unit.memo(("robustness", cfg), compute)


def _score(name: str, draws: Draws, eps_min: float) -> tuple[Tensor, Tensor]:
    if name == "max_sensitivity":
        return draws.sensitivity.max(dim=1).values, draws.zero_map
    if name == "avg_sensitivity":
        return draws.sensitivity.mean(dim=1), draws.zero_map
    other = {"local_lipschitz": None, "relative_input_stability": draws.input_relative,
             "relative_output_stability": draws.output_change,
             "relative_representation_stability": draws.representation_relative}[name]  # fmt: skip
    ratios = draws.lipschitz if other is None else relative_stability(draws.map_relative, other, eps_min)
    return kept_max(ratios, draws.kept)


def _evaluate(name: str) -> Callable[[Unit, RobustnessConfig], MetricResult]:
    def evaluate(unit: Unit, cfg: RobustnessConfig) -> MetricResult:
        _, _, ids = unit.samples()
        ids = ids[unit.first_samples(cfg.max_samples)]
        if len(ids) == 0:
            return MetricResult.empty(to_dict(cfg), "robustness")
        values, undefined = _score(name, unit_draws(unit, cfg), cfg.eps_min)
        params = to_dict(cfg)
        if unit.model.modality == "text":
            params["noise_on"] = "embeddings at the real tokens (padding stays padding); maps over the tokens"
        return MetricResult(values=values, undefined=undefined, sample_ids=ids, params=params,
                            explained="robustness")  # fmt: skip

    return evaluate


def cost(unit: Unit, cfg: RobustnessConfig) -> tuple[MetricCost, ...]:
    """The per-sample maps; once for the family, every sample explained again at each draw (``explain_batch`` rows a
    call) and, once for the model's units, one forward of the samples and of every perturbed copy."""
    n = int(unit.first_samples(cfg.max_samples).sum())
    return (*sample_maps_cost(unit), MetricCost(("robustness", cfg), explanations=n * cfg.n_draws),
            MetricCost(("robustness forwards", cfg), inputs=n, scope="model"),
            MetricCost(("robustness forwards", cfg, "draws"), inputs=n * cfg.n_draws, scope="model"))  # fmt: skip


def _spec(name: str):  # noqa: ANN202 - a MetricSpec
    return described(name, evaluate=_evaluate(name), cost=cost, config=RobustnessConfig)


MAX_SENSITIVITY = _spec("max_sensitivity")
AVG_SENSITIVITY = _spec("avg_sensitivity")
LOCAL_LIPSCHITZ = _spec("local_lipschitz")
RELATIVE_INPUT_STABILITY = _spec("relative_input_stability")
RELATIVE_OUTPUT_STABILITY = _spec("relative_output_stability")
RELATIVE_REPRESENTATION_STABILITY = _spec("relative_representation_stability")
