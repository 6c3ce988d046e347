"""The run store under faults (issue 26): one writer per folder, report / rescore read exactly the run's units,
bad folders fail before any compute, plugin code is in the resume key, SIGTERM is an interrupt."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from faithbench.attributions import CONTROLS
from faithbench.bench.cli import main
from faithbench.bench.run import runner, work
from faithbench.bench.run.rescoring import rescore
from faithbench.bench.store.folder_lock import FolderLock
from faithbench.bench.store.results import with_job_columns
from faithbench.bench.store.tidy import LEGACY_CONTROLS

SUITE = """
name = "store"
dataset = "mnist"
models = ["cnn_mnist"]
methods = ["gradient", "input_x_gradient", "gradcam"]
controls = false
metrics = ["gridpg", "entropy", "pixel_deletion"]
seed = 0
n_samples = 4
batch_size = 4

[gridpg]
n_grids = 1
"""


@pytest.fixture
def suite(tmp_path) -> Path:
    path = tmp_path / "store.toml"
    path.write_text(SUITE)
    return path


def _run(suite: Path, out: Path, *extra: str) -> int:
    return main(["run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report", *extra])


def _units(out: Path) -> set[tuple[str, str]]:
    return {(u["model"], u["method"]) for u in json.loads((out / "run.json").read_text())["units"]}


def test_a_second_run_into_a_folder_in_use_stops_before_computing_and_the_first_finishes_whole(
    suite, tmp_path, monkeypatch, capsys
):
    """Issue 26 case 1: run B (seed 1, one method) started while run A was between units used to exit 0 and
    leave run.json of B beside results.csv rows of A and unit files of both."""
    out = tmp_path / "run"
    real, codes = work.evaluate_unit, []

    def start_b_during_a(unit, s):
        if not codes:  # while run A holds the folder, after its first unit has started
            codes.append(_run(suite, out, "--seed", "1", "--methods", "gradient"))
        return real(unit, s)

    monkeypatch.setattr(work, "evaluate_unit", start_b_during_a)
    assert _run(suite, out) == 0
    assert codes == [2]
    err = capsys.readouterr().err
    assert f"error: {out} is in use by another process (bench run --suite store by pid {os.getpid()}" in err
    record = json.loads((out / "run.json").read_text())
    results = pd.read_csv(out / "results.csv")
    assert record["suite"]["seed"] == 0 and set(results["seed"]) == {0}
    assert _units(out) == {("cnn_mnist", m) for m in ("gradient", "input_x_gradient", "gradcam")}
    for entry in record["units"]:  # the tables, the manifest and the unit files agree
        unit = json.loads((out / "units" / f"{entry['model']}__{entry['method']}.json").read_text())
        assert unit["key"] == entry["key"]
        mean = results[(results.method == entry["method"]) & (results.metric == "entropy")]["mean"].item()
        values = [v for v in unit["metrics"]["entropy"]["values"] if v == v]
        assert mean == pytest.approx(sum(values) / len(values), rel=1e-12)


def test_a_killed_holder_leaves_no_stuck_lock(suite, tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "from faithbench.bench.store.folder_lock import FolderLock; "
         f"FolderLock({str(out)!r}, 'x').acquire();"
         "print('locked', flush=True); import time; time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(Exception, match=f"in use by another process \\(x by pid {holder.pid}"):
            FolderLock(out, "test").acquire()
    finally:
        holder.kill()  # SIGKILL: no clean-up runs in the holder
        holder.wait()
    assert _run(suite, out, "--methods", "gradient") == 0


def test_rescore_and_report_read_only_the_units_of_the_latest_run(suite, tmp_path):
    """Issue 26 case 2: after a 3-method run and a 2-method rerun with other settings into the same folder,
    rescore used to score a unit of the first run, labelled with the second run's seed."""
    out = tmp_path / "run"
    assert _run(suite, out) == 0
    assert _run(suite, out, "--methods", "gradient,gradcam", "--n-grids", "2", "--seed", "1") == 0
    assert (out / "units" / "cnn_mnist__input_x_gradient.json").exists()  # the first run's unit is still there
    assert _units(out) == {("cnn_mnist", "gradient"), ("cnn_mnist", "gradcam")}
    results, _, notes = rescore(out, {"deletion": {"block_size": 1}}, tmp_path / "rescored")
    assert not notes
    assert set(results["method"]) == {"gradient", "gradcam"}
    grid = results[results.metric == "gridpg"]
    assert {json.loads(p)["n_grids"] for p in grid["params"]} == {2} and set(results["seed"].astype(str)) == {"1"}
    same = pd.read_csv(out / "results.csv")
    assert set(same["method"]) == {"gradient", "gradcam"}


def test_rescore_names_a_truncated_or_replaced_unit_file_in_one_line(suite, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(suite, out, "--methods", "gradient,gradcam") == 0
    path = out / "units" / "cnn_mnist__gradcam.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # case 3: a traceback that never named the file
    capsys.readouterr()  # the run's own lines
    assert main(["rescore", str(out), "--set", "deletion.block_size=1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: unit file {path} of this run is not valid JSON") and err.count("\n") == 1
    unit = json.loads(text)
    path.write_text(json.dumps({**unit, "key": "another run's"}))
    assert main(["rescore", str(out), "--no-progress"]) == 2
    assert f"error: unit file {path} holds another computation" in capsys.readouterr().err


def test_rescore_of_a_folder_without_a_unit_list_says_how_to_record_one(suite, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(suite, out, "--methods", "gradient") == 0
    record = json.loads((out / "run.json").read_text())
    del record["units"]
    (out / "run.json").write_text(json.dumps(record))
    assert main(["rescore", str(out), "--no-progress"]) == 2
    assert "lists no units" in capsys.readouterr().err


def test_a_bad_output_folder_fails_in_one_line_before_any_compute(suite, tmp_path, monkeypatch, capsys):
    def forbidden(*args, **kwargs):
        raise AssertionError("computed before checking --out")

    monkeypatch.setattr(work, "evaluate_unit", forbidden)
    monkeypatch.setattr(runner, "load_data", forbidden)
    afile = tmp_path / "results.txt"
    afile.write_text("not a folder")
    for out in (afile, afile / "run"):  # case 4: a unit was computed, then NotADirectoryError
        assert _run(suite, out) == 2
        err = capsys.readouterr().err
        assert err == f"error: --out {out}: {afile} is a file, not a folder; choose a folder for the run\n"

    from faithbench.bench.store import folder_lock

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(folder_lock.os, "open", read_only)  # root ignores chmod: as a read-only folder answers
    assert _run(suite, tmp_path / "ro") == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"error: cannot write to {tmp_path / 'ro'} (Permission denied); choose a writable --out (out= in Python)\n"
    )


def test_a_run_that_fails_before_writing_leaves_no_folder(suite, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("data went away")

    monkeypatch.setattr(runner, "load_data", broken)
    with pytest.raises(RuntimeError, match="data went away"):
        _run(suite, tmp_path / "new")
    assert not (tmp_path / "new").exists()


PLUGIN = """
import torch
from faithbench.attributions import AttributionMethod, register_method


@register_method
class Flat(AttributionMethod):
    name = "flat"
    description = "a constant map (the test edits the constant)"
    defaults = {}

    def _attribute(self, model, inputs, targets):
        x = inputs.flatten(2).sum(1)
        return (x * VALUE + torch.arange(x.shape[1], device=x.device)).view(inputs.shape[0], *inputs.shape[-2:])


VALUE = 1.0
"""

PLUGIN_SUITE = """
name = "plugged"
plugins = ["edited_plugin"]
models = ["cnn_mnist"]
methods = ["flat"]
controls = false
metrics = ["entropy"]
n_samples = 4
batch_size = 4
"""


def test_an_edited_plugin_method_is_recomputed_not_reused(tmp_path):
    """Issue 26 case 5: the resume key hashed only faithbench's own code."""
    (tmp_path / "edited_plugin.py").write_text(PLUGIN)
    (tmp_path / "plugged.toml").write_text(PLUGIN_SUITE)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench", "run", "--suite", str(tmp_path / "plugged.toml"), "--out", str(out)]
    command += ["--no-progress", "--no-report"]

    def entropy() -> float:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return pd.read_csv(out / "results.csv").set_index("metric").loc["entropy", "mean"]

    first = entropy()
    (tmp_path / "edited_plugin.py").write_text(PLUGIN.replace("VALUE = 1.0", "VALUE = 1000.0"))
    edited = entropy()
    assert edited != pytest.approx(first)
    fresh = out.with_name("fresh")
    command[command.index(str(out))] = str(fresh)
    out = fresh
    assert entropy() == edited  # what a fresh run of the edited plugin gives


def test_sigterm_is_an_interrupt_and_the_rerun_says_what_it_resumes(suite, tmp_path):
    """Issue 26 case 8: ``kill PID`` exited 143 with only "Terminated", results.csv one unit behind units/."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "bench", "run", "--suite", str(suite), "--out", str(out), "--no-progress"]
    command += ["--no-report", "--metrics", "entropy,pixel_deletion", "--n-samples", "64"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "units").is_dir() or not any((out / "units").iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before SIGTERM reached it")
    assert proc.returncode == 143, err[-2000:]
    assert f"terminated (SIGTERM): finished units are saved in {out}; run the same command to resume" in err
    done = {p.stem for p in (out / "units").glob("*.json")}
    results = pd.read_csv(out / "results.csv")
    assert {f"cnn_mnist__{m}" for m in results["method"]} == done
    assert {f"{m}__{k}" for m, k in _units(out)} == done
    again = subprocess.run(command, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming {out}: {len(done)} of 3 units done" in again.stderr


def test_a_method_class_without_a_source_file_still_runs(suite):
    """A method defined in a notebook cell or by exec has no file to hash; the plan must not fail on it."""
    import types

    from faithbench.attributions import AttributionMethod
    from faithbench.bench.run.plan import plugin_sources
    from faithbench.bench.run.suite import load_suite

    module = types.ModuleType("notebook_cell")
    exec(  # noqa: S102 - a class with no file behind it, as a notebook cell defines it
        "from faithbench.attributions import AttributionMethod\n"
        "class Cell(AttributionMethod):\n"
        "    name = 'cell'\n"
        "    description = 'defined without a file'\n"
        "    def _attribute(self, model, inputs, targets):\n"
        "        return inputs.sum(1)\n",
        module.__dict__,
    )
    assert issubclass(module.Cell, AttributionMethod)
    module.Cell.__module__ = "notebook_cell"
    assert plugin_sources(load_suite(str(suite)), module.Cell()) == []


def test_resume_counts_only_units_of_this_plan(tmp_path):
    """A unit of an older faithbench (no plan key) or of another plan is not counted as done."""
    from faithbench.bench.run.plan import resume_count
    from faithbench.bench.store.results import RunStore

    store = RunStore(tmp_path)
    store.units.mkdir()
    for method, plan in (("gradient", "p1"), ("gradcam", "other"), ("lime", None), ("unplanned", None)):
        unit = {"model": "cnn_mnist", "method": method, **({"plan_key": plan} if plan else {})}
        (store.units / f"cnn_mnist__{method}.json").write_text(json.dumps(unit))
    plans = {("cnn_mnist", "gradient"): "p1", ("cnn_mnist", "gradcam"): "p2", ("cnn_mnist", "lime"): "p3"}
    assert resume_count(store, plans) == 1


def test_the_legacy_controls_are_controls():
    """Rows written before the ``is_control`` column name their controls from a frozen list (results.py)."""
    assert set(LEGACY_CONTROLS) <= set(CONTROLS)
    legacy = with_job_columns(pd.DataFrame({"method": ["random", "gradient", "lime@seed1"]}))
    assert list(legacy["is_control"]) == [True, False, False] and list(legacy["rerun_seed"].fillna(0)) == [0, 0, 1]
