"""The metric registry: every metric the runner can evaluate, in leaderboard order.

Adding a metric: a module with its function(s), config and ``MetricSpec`` (see
:mod:`faithbench.metrics.spec`), and one line in the tuple below (or :func:`register_metric` from outside
the package, e.g. in a suite's ``plugins`` module).
"""

from __future__ import annotations

from faithbench.metrics import (
    completeness,
    complexity,
    deletion,
    erasure,
    flipping,
    gridpg,
    naopc,
    randomisation,
    road,
    seqpg,
    single_deletion,
    truth_agreement,
)
from faithbench.metrics.spec import MetricSpec
from faithbench.registry import Registry

METRICS: Registry[MetricSpec] = Registry("metric")


def register_metric(spec: MetricSpec) -> MetricSpec:
    return METRICS.register(spec.name, spec)


for _spec in (
    gridpg.SPEC,
    seqpg.SPEC,
    deletion.DELETION,
    deletion.INSERTION,
    flipping.MORF,
    flipping.LERF,
    flipping.SRG,
    road.SPEC,
    single_deletion.SIGNED,
    single_deletion.ABSOLUTE,
    erasure.COMPREHENSIVENESS,
    erasure.SUFFICIENCY,
    naopc.COMPREHENSIVENESS,
    naopc.SUFFICIENCY,
    complexity.ENTROPY,
    complexity.ENTROPY_NORMALISED,
    complexity.ENTROPY_POSITIVE,
    complexity.GINI,
    completeness.SPEC,
    completeness.POSITIONAL_SHARE,
    randomisation.RANDOMISATION,
    randomisation.RANDOMISATION_SSIM,
    truth_agreement.CORRELATION,
    truth_agreement.MASS,
):
    register_metric(_spec)
