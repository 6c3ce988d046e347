"""The command line's arguments: every command's options (the function each command runs:
:data:`faithbench.bench.cli.COMMANDS`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from faithbench.bench.perf.cases import QUICK_HELP
from faithbench.config import defaults
from faithbench.metrics.registry import METRICS


def config_options() -> list[tuple[str, str, str, object]]:
    """(table, key, help, default) of every metric config option that offers a command-line shorthand."""
    options, seen = [], set()
    for _, spec in METRICS.items():
        if spec.table and spec.table not in seen:
            seen.add(spec.table)
            known = defaults(spec.config)
            options += [(spec.table, key, text, known[key]) for key, text in getattr(spec.config, "cli", {}).items()]
    return options


def table_overrides(args: argparse.Namespace) -> dict[str, dict]:
    """The metric settings given by their command-line shorthands, as suite tables."""
    tables: dict[str, dict] = {}
    for table, key, _, _ in config_options():
        value = getattr(args, f"cfg_{table}_{key}", None)
        if value is not None:
            tables.setdefault(table, {})[key] = value
    return tables


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def build_parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="faithbench: faithfulness and localisation of explanations")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show the full traceback of every error (also: FAITHBENCH_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_list = sub.add_parser(
        "list", parents=[common], help="show the registered metrics, presets, models, methods and suites"
    )
    p_list.add_argument(
        "--markdown", action="store_true", help="as Markdown tables (the documentation's reference page)"
    )
    p_zoo = sub.add_parser(
        "zoo", parents=[common], help="build (or load from cache) the offline model zoo and report accuracies"
    )
    p_zoo.add_argument("models", nargs="*", help="zoo models to build (default: every image model)")
    p_zoo.add_argument("--text", action="store_true", help="build every offline text model instead of the image models")
    p_zoo.add_argument(
        "--locality-grids", type=int, default=50, help="grids of the locality check per model (0: skip it)"
    )

    p_run = sub.add_parser("run", parents=[common], help="run a suite (default: vision, the embedded offline default)")
    p_run.add_argument("--suite", default="vision", help="suite name (see `list`) or path to a .toml file")
    p_run.add_argument("--models", type=_csv, help="comma-separated model names (default: the suite's)")
    p_run.add_argument("--methods", type=_csv, help="comma-separated method names")
    p_run.add_argument("--metrics", type=_csv, help="comma-separated metric names")
    p_run.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, ...")
    p_run.add_argument("--n-samples", type=int, help="images for the per-sample metrics")
    for table, key, text, default in config_options():  # shorthands the metric configs declare
        p_run.add_argument(
            f"--{key.replace('_', '-')}",
            dest=f"cfg_{table}_{key}",
            type=type(default),
            help=f"{text} ([{table}] {key})",
        )
    p_run.add_argument(
        "--seed", type=int, help="seed of the sample draw and of seeded methods (LIME, Shapley); default: the suite's"
    )
    p_run.add_argument(
        "--batch-size",
        type=int,
        help="inputs explained per method call (metrics perturb 4x as many per model call); default: the suite's",
    )
    p_run.add_argument(
        "--max-batch",
        type=int,
        help="at most this many inputs per model call, in every method and metric (memory); default: the suite's",
    )
    p_run.add_argument("--data-root", help="ImageNet-style folder (one sub-folder per class) instead of the default")
    p_run.add_argument("--out", help="output folder (default runs/SUITE); rerunning resumes")
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_run.add_argument("--no-report", action="store_true", help="skip the tables and plots after the run")
    p_run.add_argument(
        "--no-controls",
        action="store_true",
        help="skip the control explainers (random, uniform, centre, edges, oracle)",
    )

    p_rep = sub.add_parser(
        "report", parents=[common], help="leaderboard tables (text, Markdown, HTML, LaTeX) and plots of a run"
    )
    p_rep.add_argument("results", help="a run's results.csv")
    p_rep.add_argument("--out", help="output folder (default: report/ beside the results)")
    p_rep.add_argument("--alpha", type=float, default=0.05, help="level of the paired tests behind the tied-best marks")
    p_rep.add_argument(
        "--n-boot", type=int, default=1000, help="bootstrap resamples behind P(rank 1) and the rank intervals"
    )

    p_res = sub.add_parser(
        "rescore", parents=[common], help="score a finished run's stored maps again under other metric settings"
    )
    p_res.add_argument("run", help="a run folder (with maps/, written by `run`)")
    p_res.add_argument(
        "--set", action="append", metavar="TABLE.KEY=VALUE", help="a metric setting, e.g. deletion.baseline=blur"
    )
    p_res.add_argument("--out", help="output folder (default: RUN/rescored/SETTINGS)")
    p_res.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p_res.add_argument("--no-progress", action="store_true", help="no progress bar")

    p_cmp = sub.add_parser(
        "compare",
        parents=[common],
        help="CI gate: per-(model, method, metric) differences, non-zero exit on a regression or another protocol",
    )
    p_cmp.add_argument("baseline", help="baseline results.csv")
    p_cmp.add_argument("new", help="new results.csv")
    p_cmp.add_argument("--tolerance", type=float, default=0.0, help="allowed change, in each metric's reported unit")
    p_cmp.add_argument(
        "--rel-tolerance",
        type=float,
        default=0.0,
        help="allowed change as a fraction of the baseline score (the larger allowance wins)",
    )
    p_cmp.add_argument("--two-sided", action="store_true", help="also fail when a score improves beyond tolerance")
    p_cmp.add_argument(
        "--allow-new-rows",
        action="store_true",
        help="accept (model, method, metric) rows only in NEW instead of failing on them (status new, not NEW)",
    )
    p_perf = sub.add_parser(
        "perf", parents=[common], help="time the metrics and methods against Quantus and against the model calls alone"
    )
    p_perf.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p_perf.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, ...")
    p_perf.add_argument(
        "--out", default=str(Path("runs") / "perf"), help="output folder of perf.csv (default runs/perf)"
    )
    p_perf.add_argument(
        "--repeats", type=int, help="timed runs per row after one warm-up, median reported (default 3; --quick 1)"
    )
    return parser
