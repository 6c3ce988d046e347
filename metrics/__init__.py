"""Batched, device-agnostic explanation metrics returning per-sample scores.

Every function documents its formula; see ``shared/protocols.md`` for the specification.
"""

from metrics.complexity import explanation_entropy, gini_index
from metrics.deletion import ALOE_FRACTIONS, block_scores, pixel_deletion, pixel_insertion
from metrics.erasure import ERASURE_SUMMARIES, comprehensiveness_sufficiency
from metrics.gridpg import (
    GRIDPG_PRESETS,
    GridPGPreset,
    GridSelection,
    cell_masses,
    get_preset,
    grid_pointing_game,
    gridpg_maps,
    make_grids,
    select_by_confidence,
    select_grids,
    select_random_partners,
    sliding_window_maps,
    smooth_maps,
)
from metrics.seqpg import SequenceSet, build_sequences, sequence_pointing_game, truncate_segments
from metrics.types import CurveScores, ErasureScores, Scores

__all__ = [
    "ALOE_FRACTIONS",
    "ERASURE_SUMMARIES",
    "GRIDPG_PRESETS",
    "CurveScores",
    "ErasureScores",
    "GridPGPreset",
    "GridSelection",
    "Scores",
    "SequenceSet",
    "block_scores",
    "build_sequences",
    "cell_masses",
    "comprehensiveness_sufficiency",
    "explanation_entropy",
    "get_preset",
    "gini_index",
    "grid_pointing_game",
    "gridpg_maps",
    "make_grids",
    "pixel_deletion",
    "pixel_insertion",
    "select_by_confidence",
    "select_grids",
    "select_random_partners",
    "sequence_pointing_game",
    "sliding_window_maps",
    "smooth_maps",
    "truncate_segments",
]
