"""Tensors in, numbers out: score attributions you already have, as Quantus' ``metric(model, x, y, a)`` does.

    scores = faithbench.score(net, images, maps, labels, metric=NAME)  # (N,) per-sample scores of metric NAME

The metric runs through the same hook, settings table and defaults as in a suite (``benchmark()`` and the command
line): a settings table's defaults, data-derived ones resolved for the images (a deletion block of the image side /
14), the reported units (``MetricSpec.scale``). The maps are replayed to the metric as a run's stored maps are
(:mod:`faithbench.metrics.mapstore`), so only metrics that read the maps of the given inputs apply
(``MetricSpec.given_maps``); one that needs explanations of other inputs (grids, a randomised model, B-cos
contributions) is refused with the list.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from faithbench.attributions import get_method
from faithbench.config import from_table
from faithbench.errors import UserError
from faithbench.metrics.mapstore import MapStore, MissingMapsError
from faithbench.metrics.registry import METRICS
from faithbench.metrics.spec import Unit
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import InputEncoding


def scorable() -> list[str]:
    """The image metrics that read only the maps of their own samples (``MetricSpec.given_maps``)."""
    return [m for m, spec in METRICS.items() if spec.given_maps and "image" in spec.modalities]


class _Function(nn.Module):
    def __init__(self, fn: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)


def _tensor(value: Any, name: str, channels_last: bool | None, dims: int) -> Tensor:
    """A float tensor (B, C, H, W) (maps: (B, H, W) kept) from a tensor or array, channels-first or -last."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise UserError(f"{name} must be a torch tensor or a numpy array, got {type(value).__name__}")
    if value.dim() != dims and not (name == "attributions" and value.dim() == 3):
        raise UserError(f"{name} must be (B, C, H, W) or (B, H, W, C), got shape {tuple(value.shape)}")
    guess = value.dim() == 4 and value.shape[-1] in (1, 3) and value.shape[1] not in (1, 3)
    last = channels_last if channels_last is not None else guess
    # contiguous: a channels-last view would reach the model's kernels in another memory format, whose sums round
    # differently (the same inputs must give the same scores whichever layout they came in)
    return (value.permute(0, 3, 1, 2) if last and value.dim() == 4 else value).float().contiguous()


def score(
    model: nn.Module | Callable[[Tensor], Tensor],
    inputs: Tensor | np.ndarray,
    attributions: Tensor | np.ndarray,
    targets: Tensor | np.ndarray | list[int],
    *,
    metric: str,
    activation: str = "softmax",
    channels_last: bool | None = None,
    max_batch: int = 256,
    device: str | torch.device | None = None,
    **settings: Any,
) -> Tensor:
    """Per-sample scores (N,) of ``metric`` for ``attributions`` of ``targets`` on ``inputs``, on the host, in the
    units ``benchmark()`` reports; NaN where a sample's score is undefined (a map with no ranking, no mass).

    ``model``: an ``nn.Module`` or any function of a batch of inputs to logits. ``inputs``: what the model reads
    (B, C, H, W) or channels-last (B, H, W, C) (``channels_last=None``: guessed from a last axis of 1 or 3);
    the removal baseline ``mean`` is their mean colour. ``attributions``: (B, H, W) or shaped like ``inputs``
    (channels summed). ``settings``: the metric's settings table (see ``python -m bench list``), e.g.
    ``baseline="blur"``; ``max_batch``: inputs per model call at most; ``device``: default the model's."""
    if metric not in METRICS:
        raise METRICS.unknown(metric)
    if metric not in scorable():
        raise UserError(f"metric {metric!r} explains inputs of its own; score() takes: {', '.join(scorable())}")
    spec = METRICS.get(metric)
    module = model if isinstance(model, nn.Module) else _Function(model)
    params = [p for p in module.parameters()]
    dev = torch.device(device) if device is not None else (params[0].device if params else torch.device("cpu"))
    x = _tensor(inputs, "inputs", channels_last, 4)
    maps = _tensor(attributions, "attributions", channels_last, 4)
    maps = maps.sum(dim=1) if maps.dim() == 4 else maps
    t = torch.as_tensor(np.asarray(targets) if not isinstance(targets, Tensor) else targets).long().flatten()
    if maps.shape != (x.shape[0], *x.shape[2:]) or t.shape != (x.shape[0],):
        raise UserError(
            f"attributions {tuple(maps.shape)} (channels summed) and targets {tuple(t.shape)} must match inputs "
            f"{tuple(x.shape)}: (B, H, W) and (B,)"
        )
    config = from_table(spec.config, _table(spec.config, settings), f"score({metric!r})")
    if spec.refuses and (reason := spec.refuses(config)):
        raise UserError(f"score({metric!r}): {reason}")
    if hasattr(config, "for_image"):
        try:
            config = config.for_image(min(x.shape[-2:]))
        except ValueError as exc:
            raise UserError(f"score({metric!r}): {exc}") from None
    adapter = ModelAdapter(
        name="scored", family="standard", module=module, encoding=InputEncoding("identity", x.shape[1]),
        num_classes=0, input_size=tuple(x.shape[-2:]), activation=activation,
    )  # fmt: skip
    store = MapStore()
    store.add("model", x.to(dev), t.to(dev), maps)
    unit = Unit(
        model=adapter, method=get_method("gradient"), images=x, labels=t, sample_ids=torch.arange(len(t)),
        batch_size=max(1, max_batch // 4), device=dev, max_batch=max_batch, maps=store, replay=True,
    )  # fmt: skip
    try:
        result = spec.evaluate(unit, config)
    except MissingMapsError:
        raise UserError(f"metric {metric!r} needs explanations of other inputs; use benchmark()") from None
    values = result.values.double().cpu() * spec.scale
    out = torch.full((len(t),), float("nan"), dtype=torch.float64)
    out[result.sample_ids.cpu()] = torch.where(result.undefined.cpu(), float("nan"), values)
    return out


def _table(spec_config: type, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings table; a metric that may explain the predicted class (its ``target`` setting) scores the given
    targets here unless told otherwise: the maps given are of those classes."""
    table = dict(settings)
    if "target" in getattr(spec_config, "__dataclass_fields__", {}):
        table.setdefault("target", "label")
    return table
