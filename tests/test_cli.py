"""The command line as a user meets it."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.store.tidy import RESULT_COLUMNS
from faithbench.registry import Registry


def test_list_via_python_dash_m_shows_metrics_and_presets():
    out = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, check=True)
    for name in (
        "gridpg",
        "seqpg",
        "comprehensiveness",
        "sufficiency",
        "pixel_deletion",
        "pixel_insertion",
        "entropy",
        "entropy_normalised",
        "gini",
        "bcos-v2",
        "bcosification",
        "aloe",
        "eraser",
        "bcos-lm",
        "models:",
        "methods:",
        "suites:",
    ):
        assert name in out.stdout


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["explode"])
    assert exc.value.code == 2
    assert "invalid choice: 'explode'" in capsys.readouterr().err


def test_registry_lookup_names_the_valid_choices():
    reg: Registry[int] = Registry("model")
    reg.register("resnet18", 1)
    reg.register("bcos_resnet18", 2)
    assert reg.get("resnet18") == 1 and reg.names() == ["bcos_resnet18", "resnet18"]
    with pytest.raises(KeyError, match="unknown model 'vgg'; valid models: bcos_resnet18, resnet18"):
        reg.get("vgg")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("resnet18", 3)


def test_metric_registry_directions():
    from faithbench.metrics.registry import METRICS

    assert METRICS.get("gridpg").higher_is_better and not METRICS.get("pixel_deletion").higher_is_better
    assert not METRICS.get("sufficiency").higher_is_better and METRICS.get("comprehensiveness").higher_is_better
    assert list(METRICS.get("gridpg").conventions) == ["bcos-v2", "bcosification", "aloe"]


def test_zoo_command_rejects_unknown_models(capsys):
    assert main(["zoo", "resnet9"]) == 2
    # dozens of zoo models: too many for an error line, `list` shows them
    assert "unknown zoo model(s) resnet9; `python -m bench list` shows all" in capsys.readouterr().err


def test_list_shows_every_registered_model_with_its_family():
    out = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, check=True).stdout
    for name, family in (
        ("cnn_mnist", "standard"),
        ("bcos_cnn_mnist", "bcos"),
        ("bcosified_cnn_mnist", "bcosified"),
        ("aloe_vit_mnist", "aloe"),
    ):
        assert any(line.split()[:2] == [name, family] for line in out.splitlines())


def test_internal_errors_show_their_traceback_user_errors_one_line(monkeypatch, capsys):
    import faithbench.bench.cli.listing as listing

    def bug(args):
        raise RuntimeError("indices should be either on cpu or on the same device")

    monkeypatch.setattr(listing, "cmd_list", bug)  # the dispatch table looks the command up when it runs
    with pytest.raises(RuntimeError, match="same device"):  # not swallowed into "error: ..."
        main(["list"])
    assert main(["run", "--suite", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown suite 'nope'")
    from faithbench.errors import UserError

    with pytest.raises(UserError, match="unknown suite"):  # --debug re-raises user errors too
        main(["run", "--suite", "nope", "--debug"])


def test_internal_error_traceback_reaches_the_terminal(tmp_path):
    # A bug in a subprocess: exit code 1 and a Python traceback, not "error: ..." with exit 2.
    script = tmp_path / "boom.py"
    script.write_text(
        "import faithbench.bench.cli as c, faithbench.bench.cli.listing as listing\n"
        "def bug(a):\n    raise RuntimeError('deep torch failure')\n"
        "listing.cmd_list = bug\n"
        "raise SystemExit(c.main(['list']))\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "deep torch failure" in proc.stderr


def test_python_dash_m_bench_works_from_any_other_folder(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "metrics:" in proc.stdout


def test_run_help_describes_every_option():
    import argparse

    parser = __import__("faithbench.bench.cli", fromlist=["build_parser"]).build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        for action in p._actions:
            assert action.help, f"`{name} {'/'.join(action.option_strings) or action.dest}` has no help text"


def test_zoo_command_shows_accuracy_and_the_locality_check(capsys):
    assert main(["zoo", "cnn_mnist", "--locality-grids", "3"]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[-3:] == ["cells", "positive", "wins"]
    fields = row.split()
    assert fields[:2] == ["cnn_mnist", "standard"] and fields[-3] == "27"  # 3 grids x 9 cells
    assert all(f.endswith("%") for f in fields[-2:]) and "blanked to black" in out


def test_zoo_table_marks_what_was_not_measured():
    from faithbench.bench.cli.zoo import ZooRow, zoo_table

    rows = [ZooRow("m", "bcos", 0.5, None, 1.25), ZooRow("n", "aloe", 0.975, 61.0, 0.5, 0.25, 1.0, 36)]
    table = zoo_table([*rows, ZooRow("o", "bcos", 0.3, 2.0, 0.5, float("nan"), float("nan"), 0)])
    first, second, third = table.splitlines()[1:]
    assert first.split() == ["m", "bcos", "50.0%", "-", "1.2", "-", "-", "-"]
    assert third.split()[-3:] == ["-", "-", "-"]
    assert second.split() == ["n", "aloe", "97.5%", "61", "0.5", "36", "25.0%", "100.0%"]


def test_a_random_torchvision_vit_b_16_runs_the_transformer_methods_through_bench_run(tmp_path):
    """The ViT-B/16 architecture end to end with no download (issue 13): AttnLRP, CheferCAM and rollout rows."""
    import pandas as pd

    out = tmp_path / "run"
    args = ["run", "--suite", "vit-b16-random", "--n-samples", "2", "--methods", "attnlrp,chefer_cam,attention_rollout"]
    args += ["--no-controls"]
    args += ["--metrics", "entropy,completeness_gap", "--out", str(out), "--no-progress", "--no-report"]
    assert main(args) == 0
    rows = pd.read_csv(out / "results.csv")
    assert set(rows["model"]) == {"vit_b_16_random"}
    assert set(rows["method"]) == {"attnlrp", "chefer_cam", "attention_rollout"}
    assert rows.loc[rows["metric"] == "entropy", "mean"].notna().all()


def test_usage_names_the_way_the_command_line_was_started(tmp_path):
    for argv, name in (
        ([sys.executable, "-m", "bench"], "python -m bench"),
        ([sys.executable, "-m", "faithbench"], "python -m faithbench"),
        ([str(Path(sys.executable).with_name("faithbench"))], "faithbench"),
    ):
        if not Path(argv[0]).exists():
            continue  # the console script lives beside the interpreter only in an installed environment
        proc = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: {name} "), proc.stdout[:80]


def test_report_of_a_results_file_without_rows_is_one_line(tmp_path, capsys):
    (tmp_path / "results.csv").write_text(",".join(RESULT_COLUMNS) + "\n")
    assert main(["report", str(tmp_path / "results.csv")]) == 2
    assert "holds no result rows: nothing to report" in capsys.readouterr().err


@pytest.mark.parametrize("column", ["metric", "n", "unit"])
def test_report_of_a_results_file_without_a_column_names_it(tmp_path, capsys, column):
    frame = pd.DataFrame([dict.fromkeys(RESULT_COLUMNS, 1)]).drop(columns=[column])
    frame.to_csv(tmp_path / "results.csv", index=False)
    assert main(["report", str(tmp_path / "results.csv")]) == 2
    assert f"is not a faithbench results file (missing column(s) {column})" in capsys.readouterr().err


def test_a_sweep_of_a_run_without_maps_says_nothing_could_be_rescored(tmp_path, capsys):
    import faithbench

    faithbench.benchmark(["cnn_mnist"], ["gradient"], ["pixel_deletion"], n_samples=2, store_maps=False, out=tmp_path)
    assert main(["rescore", str(tmp_path), "--sweep", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "nothing could be re-scored under" in err and "no stored maps" in err
    assert not (tmp_path / "rescored" / "protocols_summary.csv").exists()
