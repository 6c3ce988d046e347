"""Batched, device-agnostic explanation metrics returning per-sample scores.

Every function documents its formula; the README's metric sections give the protocols and their presets. Each
metric module also defines the metric's typed config and evaluation hook (:mod:`faithbench.metrics.spec`),
registered in :mod:`faithbench.metrics.registry`.
"""

from faithbench.metrics.aopc_bounds import AopcBounds, aopc_bounds
from faithbench.metrics.complexity import explanation_entropy, gini_index
from faithbench.metrics.deletion import ALOE_FRACTIONS, block_scores, pixel_deletion, pixel_insertion
from faithbench.metrics.erasure import ERASURE_SUMMARIES, comprehensiveness_sufficiency
from faithbench.metrics.gridpg import cell_masses, grid_pointing_game, gridpg_maps, smooth_maps
from faithbench.metrics.gridpg_presets import GRIDPG_PRESETS, GridPGPreset, get_preset
from faithbench.metrics.grids import (
    GridSelection,
    make_grids,
    select_by_confidence,
    select_grids,
    select_random_partners,
)
from faithbench.metrics.naopc import aopc_orders, normalised_aopc
from faithbench.metrics.registry import METRICS, register_metric
from faithbench.metrics.seqpg import sequence_pointing_game
from faithbench.metrics.sequences import SequenceSet, build_sequences, truncate_segments
from faithbench.metrics.single_deletion import cell_drops, single_deletion
from faithbench.metrics.spec import Example, MetricResult, MetricSpec, NoConfig, Unit
from faithbench.metrics.types import CurveScores, ErasureScores, Scores
from faithbench.metrics.windows import explain_grids, sliding_window_maps

__all__ = [
    "AopcBounds",
    "aopc_bounds",
    "aopc_orders",
    "normalised_aopc",
    "ALOE_FRACTIONS",
    "ERASURE_SUMMARIES",
    "GRIDPG_PRESETS",
    "METRICS",
    "CurveScores",
    "ErasureScores",
    "Example",
    "GridPGPreset",
    "GridSelection",
    "MetricResult",
    "MetricSpec",
    "NoConfig",
    "Scores",
    "SequenceSet",
    "Unit",
    "block_scores",
    "build_sequences",
    "cell_drops",
    "cell_masses",
    "comprehensiveness_sufficiency",
    "explain_grids",
    "explanation_entropy",
    "get_preset",
    "gini_index",
    "grid_pointing_game",
    "gridpg_maps",
    "make_grids",
    "pixel_deletion",
    "pixel_insertion",
    "register_metric",
    "select_by_confidence",
    "select_grids",
    "select_random_partners",
    "sequence_pointing_game",
    "single_deletion",
    "sliding_window_maps",
    "smooth_maps",
    "truncate_segments",
]
