"""The command line answers at once (issue 29): ``--help`` and ``list`` read the catalog, not the registries (whose
import pulls torch and every model), option placeholders say what they take, unknown names get their close matches."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from faithbench.bench.cli import COMMANDS, build_parser
from faithbench.bench.cli.catalog import CATALOG_FILE, REGENERATE, config_options
from faithbench.bench.cli.make_catalog import INSTALLED_CATALOG, options, render, render_installed
from faithbench.bench.cli.parser import table_overrides
from faithbench.registry import LISTED_IN_FULL, Registry

HEAVY = ("torch", "torchvision", "transformers", "lxt", "captum", "zennit", "matplotlib", "pandas")
LIGHT_ARGV = [["--help"], ["list"], ["list", "--markdown"], *([name, "--help"] for name in COMMANDS)]


def test_the_catalog_is_what_the_registries_give():
    """catalog.json is generated: adding a metric, model, method, data set, suite or setting means regenerating it."""
    assert INSTALLED_CATALOG.read_text(encoding="utf-8") == render_installed(), f"{INSTALLED_CATALOG.name} is stale"
    assert CATALOG_FILE.read_text(encoding="utf-8") == render(), f"{CATALOG_FILE.name} is stale: {REGENERATE}"


def test_help_and_list_leave_torch_and_the_models_unimported():
    script = (
        "import contextlib, io, sys\n"
        "from faithbench.bench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(sys.argv[1:], prog='python -m bench')\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('faithbench.models', 'faithbench.metrics'))))\n"
    )
    for argv in LIGHT_ARGV:
        proc = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.splitlines() == ["[]", "[]"], (argv, proc.stdout)


def test_compare_reads_two_result_files_without_torch_or_the_methods():
    reference = str(Path(__file__).resolve().parent.parent / "results" / "reference" / "smoke" / "results.csv")
    script = (
        "import contextlib, io, sys\n"
        "from faithbench.bench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['compare', sys.argv[1], sys.argv[1]]) == 0\n"
        "print(sorted(m for m in ('torch', 'captum', 'transformers', 'matplotlib') if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('faithbench.attributions', 'faithbench.models'))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, reference], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["[]", "[]"], proc.stdout


def _value_options() -> list[tuple[str, argparse.Action]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [(name, a) for name, p in sub.choices.items() for a in p._actions if a.nargs != 0]


def test_every_option_that_takes_a_value_has_a_placeholder_that_says_what():
    """argparse would derive ``CFG_GRIDPG_PRESET`` from the destination: each option names its own placeholder."""
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, a in _value_options() if not a.metavar]
    assert not missing
    assert not [a.metavar for _, a in _value_options() if "CFG" in str(a.metavar)]


def test_the_metric_setting_options_follow_the_catalog():
    parser = build_parser()
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    by_flag = {a.option_strings[0]: a for a in run._actions if a.option_strings}
    argv, expected = ["run"], {}
    for option in config_options():
        if option.choices:
            assert by_flag[option.flag].metavar == "{" + ",".join(option.choices) + "}"
        argv += [option.flag, str(option.default)]
        expected.setdefault(option.table, {})[option.key] = option.default
    assert table_overrides(parser.parse_args(argv)) == expected
    assert table_overrides(parser.parse_args(["run"])) == {}
    # a setting whose default names one of its metric's conventions offers those conventions as its choices
    assert [o["choices"] for o in options() if o["key"] == "preset"] == [["bcos-v2", "bcosification", "aloe"]]
    assert json.loads(CATALOG_FILE.read_text())["generated_by"] == REGENERATE


def test_a_short_registry_names_its_close_matches_and_every_valid_name():
    reg: Registry[int] = Registry("suite")
    for name in ("smoke", "text", "vision", "vision-full"):
        reg.register(name, 0)
    with pytest.raises(KeyError) as exc:
        reg.get("vison")
    assert str(exc.value) == (
        "unknown suite 'vison' (did you mean vision, vision-full?); valid suites: smoke, text, vision, vision-full"
    )
    with pytest.raises(KeyError, match=r"^unknown suite 'cifar'; valid suites: smoke, text"):
        reg.get("cifar")
    with pytest.raises(KeyError, match=r"^x: unknown suite\(s\) Vision \(did you mean vision, vision-full\?\), nope; "):
        reg.require(["Vision", "nope"], "x")


def test_a_long_registry_names_its_close_matches_and_points_to_list():
    reg: Registry[int] = Registry("model")
    names = ["resnet18", "resnet50", *(f"net{i:03d}" for i in range(LISTED_IN_FULL))]
    for name in names:
        reg.register(name, 0)
    with pytest.raises(KeyError) as exc:
        reg.get("resnet81")
    message = str(exc.value)
    assert message.startswith("unknown model 'resnet81' (did you mean resnet18, resnet50")
    assert message.endswith(f"; `python -m bench list` shows all {len(names)} models") and "net000" not in message


def test_an_unknown_model_on_the_command_line_gets_a_short_answer():
    argv = [sys.executable, "-m", "bench", "run", "--models", "resnet81"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "unknown model(s) resnet81 (did you mean resnet18, resnet50" in proc.stderr
    assert "`python -m bench list` shows all" in proc.stderr and len(proc.stderr) < 300
