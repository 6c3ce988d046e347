"""``python -m bench list``: the registries, printed."""

from __future__ import annotations

import argparse
import sys

from faithbench.attributions import METHODS
from faithbench.bench.run.data import DATASETS
from faithbench.bench.run.suite import SUITES, suite_description
from faithbench.metrics.registry import METRICS
from faithbench.models import MODELS


def cmd_list(args: argparse.Namespace) -> int:
    """``python -m bench list``: every registered metric (and its conventions), model, method, data set and suite."""

    out = sys.stdout
    modalities = list(dict.fromkeys(d.modality for _, d in DATASETS.items()))
    out.write("metrics:\n")
    conventions = {}
    for name, spec in METRICS.items():
        direction = "higher is better" if spec.higher_is_better else "lower is better"
        blocked = [why for m in modalities if (why := spec.availability(m))]
        runs = f"[{'/'.join(spec.modalities)}]" if len(blocked) < len(modalities) else f"[{blocked[0]}]"
        out.write(f"  {name:<20} {direction:<17} {runs} {spec.description}\n")
        if spec.evaluate is None:
            out.write(f"  {'':<20} not runnable: {spec.unavailable}\n")
        if spec.conventions is not None:
            conventions.setdefault(id(spec.conventions), spec.conventions)
    for registry in conventions.values():
        out.write(f"\n{registry.plural}:\n")
        for name, conv in registry.items():
            out.write(f"  {name:<14} {conv.description}\n")
    out.write("\nmodels:\n")
    width = max(map(len, MODELS)) + 1
    for name, spec in MODELS.items():
        out.write(f"  {name:<{width}} {spec.family:<10} {spec.source:<12} {spec.description}\n")
    out.write("\nmethods:\n")
    for name, cls in METHODS.items():
        caps = cls.capabilities
        kinds = "/".join(k for k, ok in (("CNN", caps.cnn), ("ViT", caps.vit), ("text", caps.text)) if ok)
        flags = ", ".join(
            f
            for f, on in (
                ("needs conv layer", caps.needs_layer),
                ("B-cos models only", caps.needs_native),
                ("seeded", caps.seeded),
                ("class-agnostic", not caps.class_specific),
            )
            if on
        )
        out.write(f"  {name:<22} [{kinds}] {cls.description}{f' ({flags})' if flags else ''}\n")
    out.write("\ndatasets:\n")
    for name, spec in DATASETS.items():
        out.write(f"  {name:<14} [{spec.modality}] {spec.description}\n")
    out.write("\nsuites:\n")
    for name in SUITES:
        out.write(f"  {name:<14} {suite_description(name)}\n")
    return 0
