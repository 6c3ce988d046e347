"""The command line's arguments: every command's options (the function each command runs:
:data:`faithbench.bench.cli.COMMANDS`). Parsing imports no registry: the metric settings offered as options come
from the catalog (:mod:`faithbench.bench.cli.catalog`), so ``--help`` answers without loading torch."""

from __future__ import annotations

import argparse
from pathlib import Path

from faithbench.bench.cli.catalog import ConfigOption, config_options, gate_defaults, run_controls
from faithbench.bench.perf.cases import QUICK_HELP

TYPES = {"int": int, "float": float, "str": str}
METAVARS = {"int": "N", "float": "FLOAT", "str": "NAME"}


def table_overrides(args: argparse.Namespace) -> dict[str, dict]:
    """The metric settings given by their command-line shorthands, as suite tables."""
    tables: dict[str, dict] = {}
    for option in config_options():
        value = getattr(args, option.dest, None)
        if value is not None:
            tables.setdefault(option.table, {})[option.key] = value
    return tables


def _metavar(option: ConfigOption) -> str:
    """``{a,b}`` for a fixed set of names (shown, not enforced: a plugin may register another), else the type."""
    return "{" + ",".join(option.choices) + "}" if option.choices else METAVARS[option.type]


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def max_batch_arg(text: str) -> int | str:
    """``--max-batch``: ``auto`` or a number (the suite checks that it is >= 1)."""
    if text != "auto" and not text.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"must be auto or a number, got {text!r}")
    return text if text == "auto" else int(text)


def build_parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="faithbench: faithfulness and localisation of explanations",
        epilog=f"`{prog} COMMAND --help` shows the options of a command",
    )
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
    p_zoo.add_argument("models", nargs="*", metavar="MODEL", help="zoo models to build (default: every image model)")
    p_zoo.add_argument("--text", action="store_true", help="build every offline text model instead of the image models")
    p_zoo.add_argument(
        "--locality-grids", type=int, default=50, metavar="N", help="grids of the locality check per model (0: skip it)"
    )

    p_run = sub.add_parser("run", parents=[common], help="run a suite (default: vision, the embedded offline default)")
    p_run.add_argument(
        "--suite",
        metavar="NAME|FILE",
        help="suite name (see `list`) or path to a .toml file; without it, a run that names --models, --methods or "
        "--metrics asks that question at the library's defaults (as benchmark() in Python), else runs `vision`",
    )
    p_run.add_argument(
        "--models", type=_csv, metavar="NAME,...", help="comma-separated model names (default: the suite's)"
    )
    p_run.add_argument(
        "--dataset", metavar="NAME", help="data set (see `list`; default: the suite's, or the models' own)"
    )
    p_run.add_argument(
        "--plugins",
        type=_csv,
        metavar="MODULE,...",
        help="your modules to import first (they register models, methods, metrics); found in the working directory",
    )
    p_run.add_argument("--methods", type=_csv, metavar="NAME,...", help="comma-separated method names")
    p_run.add_argument("--metrics", type=_csv, metavar="NAME,...", help="comma-separated metric names")
    p_run.add_argument(
        "--device", default="auto", metavar="DEVICE", help="auto (CUDA if available), cpu, cuda, cuda:1, ..."
    )
    p_run.add_argument("--n-samples", type=int, metavar="N", help="images for the per-sample metrics")
    for option in config_options():  # shorthands the metric configs declare
        p_run.add_argument(
            option.flag,
            dest=option.dest,
            type=TYPES[option.type],
            metavar=_metavar(option),
            help=f"{option.help} ([{option.table}] {option.key}; default: the suite's)",
        )
    p_run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the sample draw and of seeded methods (LIME, Shapley); default: the suite's",
    )
    p_run.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="inputs explained per method call (the metrics' own inputs: max_batch per model call); default: the "
        "suite's",
    )
    p_run.add_argument(
        "--max-batch",
        type=max_batch_arg,
        metavar="auto|N",
        help="at most this many inputs per model call, in every method and metric; auto: 256 on the CPU, 16384 on a "
        "GPU, halved where a call runs out of memory (found by trying); default: the suite's (auto)",
    )
    p_run.add_argument(
        "--pieces",
        type=int,
        metavar="N",
        help="split each (model, method) unit into N pieces that the run's workers share (torchrun ranks, a job "
        "array, another `run` of the same suite into the same --out); default: the suite's (1)",
    )
    p_run.add_argument(
        "--workers",
        default="auto",
        metavar="auto|N",
        help="local workers of the run sharing this machine's device(s) (the pieces and claims); auto: on a GPU one "
        "per 4 CPU cores, at most 4; on the CPU one",
    )
    array = p_run.add_argument_group(
        "a SLURM job array of workers (--launcher submitit; pip install 'faithbench[slurm]')"
    )
    array.add_argument(
        "--launcher",
        choices=("here", "submitit"),
        default="here",
        metavar="{here,submitit}",
        help="here: this process is a worker (under torchrun: each rank); submitit: submit a job array of --tasks "
        "workers that share --out, and return",
    )
    array.add_argument("--tasks", type=int, default=4, metavar="N", help="workers in the array (default 4)")
    array.add_argument("--slurm-partition", metavar="NAME", help="partition of the tasks (default: the cluster's)")
    array.add_argument("--slurm-gpus-per-task", type=int, metavar="N", help="GPUs per task")
    array.add_argument("--slurm-cpus-per-task", type=int, metavar="N", help="CPU cores per task")
    array.add_argument("--slurm-mem-gb", type=int, metavar="N", help="memory per task, GB")
    array.add_argument(
        "--slurm-time",
        dest="slurm_time_min",  # SlurmSettings.time_min: every --slurm-X is its field X
        type=int,
        default=240,
        metavar="MIN",
        help="time limit per task (default 240); a task that reaches it is requeued and resumes",
    )
    array.add_argument(
        "--slurm-cluster",
        choices=("auto", "slurm", "local"),
        default="auto",
        metavar="{auto,slurm,local}",
        help="auto: SLURM where sbatch is found, else local processes; local: the array as local processes",
    )
    array.add_argument("--wait", action="store_true", help="wait for the array to finish, then write the report")
    p_run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (models, units, pieces, expected model inputs and calls) and stop: no model loads",
    )
    p_run.add_argument(
        "--times-from",
        metavar="DIR",
        help="with --dry-run: the plan's time, scaled from a finished slice of the suite in DIR (e.g. --n-samples 8 "
        "--n-grids 4, on the machine that will run it) by each unit's estimated model inputs and calls",
    )
    p_run.add_argument(
        "--data-root", metavar="DIR", help="ImageNet-style folder (one sub-folder per class) instead of the default"
    )
    p_run.add_argument("--out", metavar="DIR", help="output folder (default runs/SUITE); rerunning resumes")
    p_run.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_run.add_argument("--no-report", action="store_true", help="skip the tables and plots after the run")
    p_run.add_argument(
        "--controls",
        type=_csv,
        nargs="?",
        const=["all"],
        metavar="NAME,...",
        help=f"add the control explainers (all, or those named: {', '.join(run_controls())}); default: the suite's "
        "(none without --suite)",
    )
    p_run.add_argument(
        "--no-controls", action="store_true", help=f"skip the control explainers ({', '.join(run_controls())})"
    )
    p_run.add_argument(
        "--no-tiers", action="store_true", help="skip the suite's tiers (the ground-truth tier of vision and text)"
    )

    p_rep = sub.add_parser(
        "report", parents=[common], help="leaderboard tables (text, Markdown, HTML, LaTeX) and plots of a run"
    )
    p_rep.add_argument(
        "results",
        metavar="RUN",
        nargs="+",
        help="a run's results.csv or folder; two or more runs are merged first (as `merge`, refused when they are "
        "not comparable) into --out",
    )
    p_rep.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: report/ beside the results); with two or more runs, the merged run's folder "
        "(default runs/merged), its report in DIR/report",
    )
    p_rep.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        metavar="FLOAT",
        help="level of the paired tests behind the tied-best marks",
    )
    p_rep.add_argument(
        "--n-boot",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples behind P(rank 1) and the rank intervals",
    )

    p_mrg = sub.add_parser(
        "merge",
        parents=[common],
        help="combine runs into one run folder (one leaderboard), refused when they are not comparable",
    )
    p_mrg.add_argument("runs", metavar="RUN", nargs="+", help="runs' folders or results.csv files, two or more")
    p_mrg.add_argument("--out", metavar="DIR", required=True, help="the merged run's folder")

    p_res = sub.add_parser(
        "rescore", parents=[common], help="score a finished run's stored maps again under other metric settings"
    )
    p_res.add_argument("run", metavar="RUN_DIR", help="a run folder (with maps/, written by `run`)")
    p_res.add_argument(
        "--set", action="append", metavar="TABLE.KEY=VALUE", help="a metric setting, e.g. deletion.baseline=blur"
    )
    p_res.add_argument(
        "--sweep",
        action="store_true",
        help="re-score under every scoring-only alternative the run's metric tables declare, one setting at a "
        "time, into RUN_DIR/rescored/TABLE.KEY=VALUE; rankings compared in RUN_DIR/rescored/protocols.csv",
    )
    p_res.add_argument(
        "--sweep-key",
        action="append",
        metavar="TABLE.KEY",
        help="with --sweep (implies it): sweep only this setting (repeatable), e.g. deletion.baseline",
    )
    p_res.add_argument(
        "--out", metavar="DIR", help="output folder (default: RUN_DIR/rescored/SETTINGS; not with --sweep)"
    )
    p_res.add_argument("--device", default="auto", metavar="DEVICE", help="auto, cpu, cuda, cuda:N")
    p_res.add_argument("--no-progress", action="store_true", help="no progress bar")

    p_status = sub.add_parser(
        "status",
        parents=[common],
        help="how far a run got: units and pieces done, running (with their workers), stale and left",
    )
    p_status.add_argument("run", metavar="RUN_DIR", help="a run folder (--out of `run`)")

    p_ver = sub.add_parser(
        "verdicts",
        parents=[common],
        help="the seed papers' claims evaluated from finished runs: paired estimates, intervals and verdicts",
    )
    p_ver.add_argument(
        "runs", nargs="*", metavar="RUN_DIR", help="finished run folders (one per suite: vision-full, text, ...)"
    )
    p_ver.add_argument("--claims", metavar="FILE", help="a claims file (default: faithbench's paper_claims.toml)")
    p_ver.add_argument("--out", default=str(Path("runs") / "verdicts"), metavar="DIR", help="default runs/verdicts")
    p_ver.add_argument(
        "--record",
        metavar="DIR",
        help="also write what the claims read of each run (their rows' scores, the models' record and locality "
        "checks) into DIR/SUITE, a small run folder that verdicts reads back to the same table",
    )
    p_ver.add_argument(
        "--locality-grids",
        type=int,
        default=50,
        metavar="N",
        help="grids of the locality check behind the localisation claims' eligibility, for models the run folder "
        "has no check of (0: measure none)",
    )

    add_compare(sub, common)
    add_numerics(sub, common)
    p_perf = sub.add_parser(
        "perf", parents=[common], help="time the metrics and methods against Quantus and against the model calls alone"
    )
    p_perf.add_argument("--quick", action="store_true", help=QUICK_HELP)
    p_perf.add_argument(
        "--device", default="auto", metavar="DEVICE", help="auto (CUDA if available), cpu, cuda, cuda:1, ..."
    )
    p_perf.add_argument(
        "--out", default=str(Path("runs") / "perf"), metavar="DIR", help="output folder of perf.csv (default runs/perf)"
    )
    p_perf.add_argument(
        "--only",
        metavar="PARTS",
        help="time only these parts, comma-separated: metrics, robustness (the metrics that perturb the input or "
        "the model and explain again, or perturb and weigh the map), methods (default: all three)",
    )
    p_perf.add_argument(
        "--case",
        action="append",
        metavar="MODEL:PX:BATCH",
        help="time this model at this size and batch instead of the default cases (repeatable), e.g. "
        "--case resnet18:224:4; --quick's other sizes still apply",
    )
    p_perf.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help=(
            "rounds in which every ratio's sides are timed in turns, after the warm-up; medians with min-max "
            "reported (default 10; --quick 7)"
        ),
    )
    return parser


# ``compare`` (the CI gate) states its defaults in ``--help``, from the catalog (parsing imports nothing heavy).
def add_compare(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p_cmp = sub.add_parser(
        "compare",
        parents=[common],
        help="CI gate: per-(model, method, metric) differences, non-zero exit on a regression or another protocol",
    )
    p_cmp.add_argument("baseline", metavar="BASELINE_CSV", help="baseline results.csv")
    p_cmp.add_argument("new", metavar="NEW_CSV", help="new results.csv")
    gate = gate_defaults()
    absolute = gate["abs_of_scale"]
    p_cmp.add_argument(
        "--tolerance",
        type=float,
        default=None,
        metavar="FLOAT",
        help=f"allowed change, in each metric's reported unit (default: {absolute:g} of the unit's full scale, i.e. "
        f"{absolute:g} for scores in 0-1, {100 * absolute:g} points for percentages)",
    )
    p_cmp.add_argument(
        "--rel-tolerance",
        type=float,
        metavar="FLOAT",
        default=gate["relative"],
        help=f"allowed change as a fraction of the baseline score; the larger allowance wins (default "
        f"{gate['relative']:g}: passes float noise of other pieces, workers, batch sizes and CPU types)",
    )
    p_cmp.add_argument(
        "--accuracy-floor",
        type=float,
        default=None,
        metavar="PERCENT",
        help="fail a model whose held-out accuracy in the new run is not above this (default: chance, the most "
        "frequent label's share, plus 3 standard errors)",
    )
    p_cmp.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=gate["accuracy_drop"],
        metavar="POINTS",
        help=f"fail a model whose held-out accuracy fell more than this below the baseline's (default "
        f"{gate['accuracy_drop']:g} points)",
    )
    p_cmp.add_argument("--two-sided", action="store_true", help="also fail when a score improves beyond tolerance")
    p_cmp.add_argument(
        "--allow-new-rows",
        action="store_true",
        help="accept (model, method, metric) rows only in NEW_CSV instead of failing on them (status new)",
    )


def add_numerics(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p_num = sub.add_parser(
        "numerics",
        parents=[common],
        help='the portable CPU numerics as shell lines: eval "$(faithbench numerics)" before a run that a gate on '
        "another machine compares (recorded in every row: numerics)",
    )
    p_num.add_argument(
        "--check", action="store_true", help="say which numerics this shell has; exit 1 unless they are the portable"
    )
