"""Checks of a user's model before any compute: what :func:`faithbench.models.user.wrap_model` can see alone (the
normalisation against the channels, the weights' dtype, one forward pass: a tensor of logits, not probabilities) and,
at the start of a run, what needs the data (channels, image size and class count against the data set).

Each mistake is one :class:`~faithbench.errors.UserError` line that names the model and says the fix.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from faithbench.errors import UserError

LogitsSelector = int | str | Callable[[object], Tensor]
PROBE_IMAGES = 4  # random images of the wrap-time forward pass


class SelectLogits(nn.Module):
    """``module`` whose output (a tuple, a list, a dict or an object with attributes) is reduced to its logits by
    ``logits``: an index, a key or attribute name, or a function of the output."""

    def __init__(self, module: nn.Module, logits: LogitsSelector) -> None:
        super().__init__()
        self.module = module
        self.logits = logits

    def forward(self, *args: object, **kwargs: object) -> Tensor:
        return select(self.module(*args, **kwargs), self.logits)


def select(output: object, logits: LogitsSelector) -> Tensor:
    if callable(logits):
        return logits(output)
    if isinstance(logits, int):
        return output[logits]  # type: ignore[index]
    if isinstance(output, Mapping):
        return output[logits]
    return getattr(output, logits)


def channels_of(mean: Sequence[float] | None, std: Sequence[float] | None, channels: int | None, name: str) -> int:
    """The image channels the model reads: ``channels``, else as many as ``mean`` has values, else 3; a
    normalisation that does not match is refused."""
    if (mean is None) != (std is None):
        raise UserError(f"model {name!r}: give both mean and std (the input normalisation), or neither")
    if mean is None:
        return channels or 3
    if len(mean) != len(std):  # type: ignore[arg-type]
        raise UserError(f"model {name!r}: mean has {len(mean)} values and std {len(std)}; give one per channel")  # type: ignore[arg-type]
    if channels is not None and channels != len(mean):
        raise UserError(
            f"model {name!r}: channels={channels} but mean and std have {len(mean)} value(s); give one value per "
            f"channel (e.g. mean={tuple(mean) * channels if len(mean) == 1 else tuple(mean)[:1]})"
        )
    return len(mean)


def check_dtype(module: nn.Module, name: str) -> None:
    """faithbench feeds float32 images: a model with other floating-point weights is refused with the fix."""
    kinds = {p.dtype for p in module.parameters() if p.is_floating_point()}
    other = sorted(str(k).removeprefix("torch.") for k in kinds - {torch.float32})
    if other:
        raise UserError(
            f"model {name!r} has {', '.join(other)} weights; faithbench feeds float32 images and explains in float32: "
            "wrap model.float()"
        )


def probe(module: nn.Module, inputs: Tensor, name: str, has_selector: bool) -> int:
    """One forward pass on ``inputs`` (encoded random images): the output must be (B, K) finite float logits;
    rows that are probabilities (non-negative, summing to 1) get a warning. Returns K."""
    try:
        with torch.no_grad():
            output = module(inputs)
    except Exception as exc:  # the user's forward: any error is theirs, said in one line
        first = (str(exc).splitlines() or [""])[0]
        raise UserError(
            f"model {name!r} fails on images of shape {tuple(inputs.shape)} ({type(exc).__name__}: {first}); check "
            "channels, input_size, mean and std"
        ) from None
    if not isinstance(output, Tensor):
        how = "logits=0 (its index)" if isinstance(output, tuple | list) else "logits='logits' (its key or attribute)"
        what = type(output).__name__
        fix = "" if has_selector else f"; pass {how} or a function of the output to wrap_model"
        raise UserError(f"model {name!r} returns a {what}, not a tensor of logits{fix}")
    if output.dim() != 2 or output.shape[0] != inputs.shape[0]:
        raise UserError(
            f"model {name!r} returns shape {tuple(output.shape)} for {inputs.shape[0]} images; expected logits "
            f"({inputs.shape[0]}, num_classes)"
        )
    if not output.is_floating_point() or not bool(torch.isfinite(output).all()):
        raise UserError(f"model {name!r} returns non-finite or non-float logits ({output.dtype}) on random images")
    rows = output.sum(dim=1)
    if output.shape[1] > 1 and bool((output >= 0).all()) and torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        warnings.warn(
            f"model {name!r} seems to return probabilities (its rows are non-negative and sum to 1): the metrics "
            "apply softmax to the logits themselves; wrap the model without its final softmax",
            UserWarning,
            stacklevel=3,
        )
    return int(output.shape[1])


def check_fit(
    name: str,
    *,
    channels: int,
    input_size: Sequence[int],
    num_classes: int,
    dataset: str,
    data_channels: int | None,
    data_size: int | None,
    n_labels: int,
) -> None:
    """A user's image model against the data set of the run: channels, image size, class count."""
    if data_channels is not None and channels != data_channels:
        fix = (
            "channels=1 (one mean and std value) or dataset='mnist-224' (3-channel 224 px digits)"
            if data_channels == 1
            else "channels=3 (three mean and std values) or a grey data set such as dataset='mnist'"
        )
        raise UserError(
            f"model {name!r} reads {channels}-channel images but dataset {dataset!r} has {data_channels}-channel "
            f"images: wrap it with {fix}"
        )
    if data_size is not None and tuple(input_size) != (data_size, data_size):
        raise UserError(
            f"model {name!r} was wrapped with input_size={tuple(input_size)} but dataset {dataset!r} has "
            f"{data_size} x {data_size} px images: wrap it with input_size=({data_size}, {data_size}) or pick a data "
            "set of its size"
        )
    if n_labels > num_classes:
        raise UserError(
            f"model {name!r} predicts {num_classes} classes but dataset {dataset!r} has labels up to {n_labels - 1}: "
            "a model for this data set's classes is needed"
        )
