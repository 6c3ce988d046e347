"""``python -m bench numerics``: the portable CPU numerics as shell lines (:mod:`faithbench.bench.run.cpu_numerics`)."""

from __future__ import annotations

import argparse
import sys

from faithbench.bench.run.cpu_numerics import numerics_in_effect, shell_lines


def cmd_numerics(args: argparse.Namespace) -> int:
    if args.check:
        now = numerics_in_effect()
        sys.stdout.write(f"numerics: {now}\n")
        return 0 if now == "portable" else 1
    sys.stdout.write(shell_lines())
    return 0
