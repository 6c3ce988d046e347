"""The tier's models as registry entries: each hand-set network with and without its suppressor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faithbench.models.adapter import ModelAdapter, ModelSpec

Build = Callable[..., ModelAdapter]


def hand_set_specs(
    adapter: Callable[[str, str, bool], Build], rows: tuple[tuple[str, str, bool], ...], **data: Any
) -> tuple[ModelSpec, ...]:
    """One standard, hand-set :class:`ModelSpec` per ``(name, description, suppressor)`` row, built by
    ``adapter(name, description, suppressor)``; ``data``: the modality, data set and tokenizer its inputs come from."""
    kind = dict(family="standard", source="hand-set", **data)
    return tuple(ModelSpec(name=n, description=text, build=adapter(n, text, sup), **kind) for n, text, sup in rows)
