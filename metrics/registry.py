"""The metric registry: what ``python -m bench list`` shows and the runner will dispatch on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from faithbench.registry import Registry
from metrics.complexity import explanation_entropy, gini_index
from metrics.deletion import pixel_deletion, pixel_insertion
from metrics.erasure import ERASURE_SUMMARIES, comprehensiveness_sufficiency
from metrics.gridpg import GRIDPG_PRESETS, grid_pointing_game
from metrics.seqpg import sequence_pointing_game


@dataclass(frozen=True)
class MetricSpec:
    """How to compute, read and report one metric.

    ``scale`` multiplies raw scores for reporting (100 where the papers report percent).
    ``presets`` names the protocol conventions the metric offers (first = default).
    """

    name: str
    compute: Callable[..., object]
    higher_is_better: bool
    modalities: tuple[str, ...]
    scale: float
    unit: str
    description: str
    presets: tuple[str, ...] = field(default=())


METRICS: Registry[MetricSpec] = Registry("metric")

for _spec in (
    MetricSpec(
        "gridpg",
        grid_pointing_game,
        True,
        ("image",),
        100,
        "%",
        "grid pointing game: positive-attribution share of the explained cell",
        tuple(GRIDPG_PRESETS),
    ),
    MetricSpec(
        "seqpg",
        sequence_pointing_game,
        True,
        ("text",),
        100,
        "%",
        "sequence pointing game: positive-attribution share of the explained segment",
    ),
    MetricSpec(
        "comprehensiveness",
        comprehensiveness_sufficiency,
        True,
        ("text", "image"),
        100,
        "%",
        "p(x) - p(x without its top-k features), summarised over k",
        tuple(ERASURE_SUMMARIES),
    ),
    MetricSpec(
        "sufficiency",
        comprehensiveness_sufficiency,
        False,
        ("text", "image"),
        100,
        "%",
        "p(x) - p(top-k features only), summarised over k",
        tuple(ERASURE_SUMMARIES),
    ),
    MetricSpec(
        "pixel_deletion",
        pixel_deletion,
        False,
        ("image",),
        1,
        "AUC",
        "class probability as top-ranked blocks are removed; normalised area",
    ),
    MetricSpec(
        "pixel_insertion",
        pixel_insertion,
        True,
        ("image",),
        1,
        "AUC",
        "class probability as top-ranked blocks are revealed; normalised area",
    ),
    MetricSpec(
        "entropy",
        explanation_entropy,
        False,
        ("text", "image"),
        1,
        "nats",
        "Shannon entropy of |a| / sum |a|",
    ),
    MetricSpec(
        "entropy_normalised",
        partial(explanation_entropy, normalise=True),
        False,
        ("text", "image"),
        1,
        "",
        "entropy divided by ln(number of features), in [0, 1]",
    ),
    MetricSpec("gini", gini_index, True, ("text", "image"), 1, "", "Gini index of |a| (sparseness), in [0, 1)"),
):
    METRICS.register(_spec.name, _spec)
