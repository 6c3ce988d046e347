"""``python -m bench``: a thin command line over the registries, runner and reports."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence

from faithbench.bench.listing import cmd_list as _cmd_list
from faithbench.bench.perf import add_perf_parser
from faithbench.bench.rescore_cli import add_rescore_parser


def _cmd_zoo(args: argparse.Namespace) -> int:
    from faithbench.bench.zoo_report import LEGEND, cost_lines, training_costs, zoo_rows, zoo_table
    from faithbench.models import zoo

    # Default: the digit zoo (minutes); --text: the CPU-sized text zoo (about 25 min on 2 cores); or the named
    # models (GPU presets and Hugging Face checkpoints are built only when named).
    modality = "text" if args.text else "image"
    default = [n for n, r in zoo.RECIPES.items() if r.modality == modality and not r.on_request]
    names = zoo.RECIPES.check(args.models or default, "zoo models")
    rows = zoo_rows(list(names), n_grids=args.locality_grids)
    sys.stdout.write(zoo_table(rows) + "\n")
    if args.locality_grids:
        sys.stdout.write(LEGEND + "\n")
    costs = training_costs(rows)
    if costs:
        sys.stdout.write(cost_lines(costs) + "\n")
    sys.stdout.write(f"checkpoints: {zoo.cache_dir()}\n")
    return 0


def _config_options() -> list[tuple[str, str, str, object]]:
    """(table, key, help, default) of every metric config option that offers a command-line shorthand."""
    from faithbench.config import defaults
    from faithbench.metrics.registry import METRICS

    options, seen = [], set()
    for _, spec in METRICS.items():
        if spec.table and spec.table not in seen:
            seen.add(spec.table)
            known = defaults(spec.config)
            options += [(spec.table, key, text, known[key]) for key, text in getattr(spec.config, "cli", {}).items()]
    return options


def _table_overrides(args: argparse.Namespace) -> dict[str, dict]:
    tables: dict[str, dict] = {}
    for table, key, _, _ in _config_options():
        value = getattr(args, f"cfg_{table}_{key}", None)
        if value is not None:
            tables.setdefault(table, {})[key] = value
    return tables


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


@contextlib.contextmanager
def _no_progress_bars(disable: bool) -> Iterator[None]:
    """--no-progress also silences the zoo's training bars (tqdm reads its defaults from TQDM_* variables)."""
    old = os.environ.get("TQDM_DISABLE")
    if disable:
        os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = old


def _cmd_run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from faithbench.bench.report import report
    from faithbench.bench.runner import run
    from faithbench.bench.suite import load_suite, with_overrides

    suite = with_overrides(
        load_suite(args.suite),
        models=args.models,
        methods=args.methods,
        metrics=args.metrics,
        seed=args.seed,
        n_samples=args.n_samples,
        batch_size=args.batch_size,
        max_batch=args.max_batch,
        data_root=args.data_root,
        dataset="imagefolder" if args.data_root else None,
        tables=_table_overrides(args),
        controls=[] if args.no_controls else None,
    )
    out = Path(args.out or Path("runs") / suite.name)
    try:
        with _no_progress_bars(args.no_progress):
            results = run(suite, out, device=args.device, progress=not args.no_progress)
    except KeyboardInterrupt as exc:
        from faithbench.bench.runner import Terminated

        why = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        sys.stderr.write(f"\n{why}: finished units are saved in {out}; run the same command to resume\n")
        return 143 if isinstance(exc, Terminated) else 130
    if results is None:  # a non-zero torchrun rank
        return 0
    if results.empty:
        sys.stderr.write("no (model, method) pair could be evaluated; see skipped.json\n")
        return 1
    if args.no_report:
        from faithbench.bench.report import leaderboard, to_text

        text, files = to_text(leaderboard(results)), []
    else:
        text, tables, plots = report(out / "results.csv")
        files = [*tables.values(), *plots]
    sys.stdout.write(f"\nleaderboard ({suite.name}, mean ± 95% CI half-width):\n{text}\n\n")
    sys.stdout.write(f"results:  {out / 'results.csv'} (per sample: samples.csv, curves: curves.csv)\n")
    for f in files:
        sys.stdout.write(f"report:   {f}\n")
    import json

    skipped = json.loads((out / "skipped.json").read_text())
    if skipped:
        sys.stdout.write(f"skipped {len(skipped)} unsupported (model, method) pairs: see {out / 'skipped.json'}\n")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from faithbench.bench.report import report
    from faithbench.errors import UserError

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must lie in (0, 1), got {args.alpha}")
    if args.n_boot < 100:
        raise UserError(f"--n-boot must be at least 100, got {args.n_boot}")
    text, tables, plots = report(
        Path(args.results), Path(args.out) if args.out else None, alpha=args.alpha, n_boot=args.n_boot
    )
    sys.stdout.write(text + "\n\n")
    for f in [*tables.values(), *plots]:
        sys.stdout.write(f"wrote {f}\n")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from faithbench.bench.compare import FAILING, compare
    from faithbench.bench.report import to_text

    table, failed = compare(
        Path(args.baseline),
        Path(args.new),
        tolerance=args.tolerance,
        rel_tolerance=args.rel_tolerance,
        two_sided=args.two_sided,
        allow_new_rows=args.allow_new_rows,
    )
    differences = table.attrs.get("differences", [])
    if differences:  # what differs between the runs, before any score
        sys.stdout.write("What differs between the runs:\n" + "".join(f"  {line}\n" for line in differences) + "\n")
    shown = table.copy()
    for col in ("mean_base", "mean_new", "delta", "delta_ci_low", "delta_ci_high"):
        fmt = "{:+.4f}" if col.startswith("delta") else "{:.4f}"
        shown[col] = shown[col].map(lambda v, fmt=fmt: "" if v != v else fmt.format(v))
    if not shown["detail"].astype(bool).any():
        shown = shown.drop(columns="detail")
    sys.stdout.write(to_text(shown) + "\n")
    bad = table[table["status"].isin(FAILING)]
    settings = f"tolerance {args.tolerance}, relative {args.rel_tolerance}{', two-sided' if args.two_sided else ''}"
    base_suite, new_suite = table.attrs.get("suites", ("", ""))
    if failed:
        other = f"; the runs are of different suites ({base_suite} vs {new_suite})" if base_suite != new_suite else ""
        sys.stdout.write(f"\nFAIL: {len(bad)} row(s) {', '.join(sorted(set(bad['status'])))} ({settings}){other}\n")
        return 1
    accepted = int((table["status"] == "new").sum())
    compared = len(table) - accepted
    extra = f"; {accepted} new row(s) accepted (--allow-new-rows)" if accepted else ""
    sys.stdout.write(f"\nOK: {compared} rows within tolerance ({settings}){extra}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="faithbench: faithfulness and localisation of explanations"
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="show the full traceback of every error (also: FAITHBENCH_DEBUG=1)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_list = sub.add_parser(
        "list", parents=[common], help="show the registered metrics, presets, models, methods and suites"
    )
    p_list.set_defaults(func=_cmd_list)
    p_zoo = sub.add_parser(
        "zoo", parents=[common], help="build (or load from cache) the offline model zoo and report accuracies"
    )
    p_zoo.add_argument("models", nargs="*", help="zoo models to build (default: every image model)")
    p_zoo.add_argument("--text", action="store_true", help="build every offline text model instead of the image models")
    p_zoo.add_argument(
        "--locality-grids", type=int, default=50, help="grids of the locality check per model (0: skip it)"
    )
    p_zoo.set_defaults(func=_cmd_zoo)

    p_run = sub.add_parser("run", parents=[common], help="run a suite (default: vision, the embedded offline default)")
    p_run.add_argument("--suite", default="vision", help="suite name (see `list`) or path to a .toml file")
    p_run.add_argument("--models", type=_csv, help="comma-separated model names (default: the suite's)")
    p_run.add_argument("--methods", type=_csv, help="comma-separated method names")
    p_run.add_argument("--metrics", type=_csv, help="comma-separated metric names")
    p_run.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, cuda:1, ...")
    p_run.add_argument("--n-samples", type=int, help="images for the per-sample metrics")
    for table, key, text, default in _config_options():  # shorthands the metric configs declare
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
    p_run.set_defaults(func=_cmd_run)

    p_rep = sub.add_parser(
        "report", parents=[common], help="leaderboard tables (text, Markdown, HTML, LaTeX) and plots of a run"
    )
    p_rep.add_argument("results", help="a run's results.csv")
    p_rep.add_argument("--out", help="output folder (default: report/ beside the results)")
    p_rep.add_argument("--alpha", type=float, default=0.05, help="level of the paired tests behind the tied-best marks")
    p_rep.add_argument(
        "--n-boot", type=int, default=1000, help="bootstrap resamples behind P(rank 1) and the rank intervals"
    )
    p_rep.set_defaults(func=_cmd_report)

    add_rescore_parser(sub, common, _no_progress_bars)

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
    p_cmp.set_defaults(func=_cmd_compare)
    add_perf_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. User errors print one line (exit 2); anything else is a bug or an environment
    problem and shows its traceback (``--debug`` shows it for user errors too)."""
    import warnings

    from faithbench.errors import UserError

    # Captum announces every hook it sets on activations; a long run would repeat it thousands of times.
    warnings.filterwarnings("ignore", message="Setting .*hooks", category=UserWarning)
    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get("FAITHBENCH_DEBUG", "") not in ("", "0")
    try:
        return args.func(args)
    except UserError as exc:
        if debug:
            raise
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
