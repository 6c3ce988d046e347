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
    for title, registry in (("models", MODELS), ("methods", METHODS)):
        names = ", ".join(registry) if len(registry) else "(none registered yet)"
        out.write(f"\n{title}: {names}\n")
    out.write("\nsuites: (none yet)\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="faithbench: faithfulness and localisation of explanations"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_list = sub.add_parser("list", help="show the registered metrics, presets, models, methods and suites")
    p_list.set_defaults(func=_cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
