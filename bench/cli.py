"""``python -m bench``: a thin command line over the registries, runner and reports."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_list(args: argparse.Namespace) -> int:
    from attributions import METHODS
    from metrics.erasure import ERASURE_SUMMARIES
    from metrics.gridpg import GRIDPG_PRESETS
    from metrics.registry import METRICS
    from models import MODELS

    out = sys.stdout
    out.write("metrics:\n")
    for name in METRICS:
        spec = METRICS.get(name)
        direction = "higher is better" if spec.higher_is_better else "lower is better"
        presets = f"  presets: {', '.join(spec.presets)}" if spec.presets else ""
        out.write(f"  {name:<20} {direction:<17} [{'/'.join(spec.modalities)}] {spec.description}{presets}\n")
    out.write("\nGridPG presets:\n")
    for p in GRIDPG_PRESETS.values():
        out.write(f"  {p.name:<14} {p.description}\n")
    out.write("\ncomprehensiveness/sufficiency summaries:\n")
    for s in ERASURE_SUMMARIES.values():
        out.write(f"  {s.name:<14} {s.description}\n")
    out.write("\nmodels:\n")
    width = max(map(len, MODELS)) + 1
    for name in MODELS:
        spec = MODELS.get(name)
        out.write(f"  {name:<{width}} {spec.family:<10} {spec.source:<12} {spec.description}\n")
    out.write("\nmethods:\n")
    for name in METHODS:
        cls = METHODS.get(name)
        caps = cls.capabilities
        kinds = "/".join(k for k, ok in (("CNN", caps.cnn), ("ViT", caps.vit), ("text", caps.text)) if ok)
        flags = ", ".join(
            f
            for f, on in (
                ("needs conv layer", caps.needs_layer),
                ("B-cos models only", caps.needs_native),
                ("per sample", not caps.batchable),
                ("seeded", caps.seeded),
                ("class-agnostic", not caps.class_specific),
            )
            if on
        )
        out.write(f"  {name:<22} [{kinds}] {cls.description}{f' ({flags})' if flags else ''}\n")
    out.write("\nsuites: (none yet)\n")
    return 0


def _cmd_zoo(args: argparse.Namespace) -> int:
    import time

    from models import zoo

    names = args.models or list(zoo.RECIPES)
    unknown = [n for n in names if n not in zoo.RECIPES]
    if unknown:
        sys.stderr.write(f"unknown zoo model(s) {', '.join(unknown)}; valid: {', '.join(zoo.RECIPES)}\n")
        return 2
    rows = []
    for name in names:
        start = time.perf_counter()
        _, info = zoo.build(name)
        rows.append((name, zoo.RECIPES[name].family, info["test_accuracy"], time.perf_counter() - start))
    sys.stdout.write(f"{'model':<22} {'family':<10} {'held-out acc':>12} {'seconds':>8}\n")
    for name, family, acc, secs in rows:
        sys.stdout.write(f"{name:<22} {family:<10} {100 * acc:>11.1f}% {secs:>8.1f}\n")
    sys.stdout.write(f"checkpoints: {zoo.cache_dir()}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="faithbench: faithfulness and localisation of explanations"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_list = sub.add_parser("list", help="show the registered metrics, presets, models, methods and suites")
    p_list.set_defaults(func=_cmd_list)
    p_zoo = sub.add_parser(
        "zoo", help="build (or load from cache) the offline model zoo and report accuracies"
    )
    p_zoo.add_argument("models", nargs="*", help="zoo models to build (default: all)")
    p_zoo.set_defaults(func=_cmd_zoo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
