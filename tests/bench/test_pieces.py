"""Work keyed by content (issue 30): units in pieces that any number of workers claim in the shared run folder; the
same bytes from 1, 2 or 3 workers; a resumed run reuses every finished piece; a killed worker's claim expires."""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from faithbench.bench.cli import main
from faithbench.bench.run import runner, work
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.run_status import run_status
from faithbench.bench.run.suite import build_suite
from faithbench.bench.store.claims import Claims
from faithbench.bench.store.pieces import merge_pieces
from faithbench.bench.store.results import RunStore

SUITE = {
    "name": "pieces",
    "dataset": "mnist",
    "models": ["cnn_mnist"],
    "methods": ["gradient", "input_x_gradient"],
    "controls": ["random"],
    "metrics": ["gridpg", "pixel_deletion", "entropy"],
    "seed": 0,
    "n_samples": 6,
    "batch_size": 4,
    "pieces": 3,
    "gridpg": {"preset": "bcos-v2", "n_grids": 3},
    "deletion": {"block_size": 4},
}
TOML = """
name = "pieces"
dataset = "mnist"
models = ["cnn_mnist"]
methods = ["gradient", "input_x_gradient"]
controls = ["random"]
metrics = ["gridpg", "pixel_deletion", "entropy"]
seed = 0
n_samples = 6
batch_size = 4
pieces = 3

[gridpg]
preset = "bcos-v2"
n_grids = 3

[deletion]
block_size = 4
"""
COST = ["explain_time_s", "metric_time_s", "piece_time_s", "model_calls", "model_inputs", "peak_memory_mb"]
COST += ["device", "created_utc"]  # where and when: the provenance of the computation
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}  # as torchrun sets it for each worker: the same kernels


def _cli(out: Path, suite: Path, workers: int, env: dict | None = None) -> subprocess.CompletedProcess:
    head = [sys.executable] + (["-m", "torch.distributed.run", "--nproc_per_node", str(workers)] if workers > 1 else [])
    args = ["-m", "bench", "run", "--suite", str(suite), "--out", str(out), "--no-progress", "--no-report"]
    return subprocess.run(
        head + args + ["--device", "cpu"], capture_output=True, text=True, timeout=600, env=env or ONE_THREAD
    )


def _same_results(a: Path, b: Path) -> None:
    """samples.csv and curves.csv byte for byte; results.csv but for the cost and provenance of the computation."""
    for name in ("samples.csv", "curves.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ra, rb = (pd.read_csv(p / "results.csv").drop(columns=COST) for p in (a, b))
    pd.testing.assert_frame_equal(ra, rb)


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "pieces.toml"
    path.write_text(TOML)
    return path


@pytest.fixture(scope="module")
def one_worker(suite_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    proc = _cli(out, suite_file, 1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_claims_are_exclusive_and_a_stale_claim_is_taken_over(tmp_path):
    a, b = Claims(tmp_path, stale_s=60), Claims(tmp_path, stale_s=60)
    try:
        assert a.claim("m__x.0of2") and not b.claim("m__x.0of2")  # one holder
        assert b.claim("m__x.1of2")  # another piece is free
        old = time.time() - 3600
        os.utime(a.path("m__x.0of2"), (old, old))  # its holder stopped refreshing it an hour ago
        assert b.claim("m__x.0of2") and not a.claim("m__x.0of2")
        b.release("m__x.0of2")
        assert not a.path("m__x.0of2").exists() and a.claim("m__x.0of2")
    finally:
        a.close(), b.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # closing gives every claim back, leaves no probe


def test_the_heartbeat_keeps_a_live_claim_fresh(tmp_path):
    a, b = Claims(tmp_path, stale_s=0.6, heartbeat_s=0.05), Claims(tmp_path, stale_s=0.6)
    try:
        assert a.claim("p")
        time.sleep(1.2)  # twice the stale limit: only the heartbeat keeps it
        assert not b.claim("p")
    finally:
        a.close(), b.close()


def test_merging_pieces_orders_samples_and_adds_up_their_cost():
    def piece(ids, values, calls):
        rec = {"values": values, "undefined": [False] * len(ids), "sample_ids": ids, "curve": None, "fractions": None}
        return {"metrics": {"m": {**rec, "explain_time_s": 1.0, "metric_time_s": 0.5, "model_calls": calls,
                                  "model_inputs": 2 * calls, "peak_memory_mb": None}}}  # fmt: skip

    merged = merge_pieces([piece([0, 3], [1.0, 4.0], 2), piece([1, 4], [2.0, 5.0], 3), piece([2], [3.0], 1)])["m"]
    assert merged["sample_ids"] == [0, 1, 2, 3, 4] and merged["values"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert (merged["explain_time_s"], merged["metric_time_s"], merged["model_calls"]) == (3.0, 1.5, 6)
    assert merged["model_inputs"] == 12 and merged["peak_memory_mb"] is None


@pytest.mark.parametrize("workers", [2, 3])
def test_the_same_bytes_from_one_two_and_three_workers(one_worker, suite_file, tmp_path, workers):
    proc = _cli(tmp_path / "run", suite_file, workers)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _same_results(one_worker, tmp_path / "run")
    assert not list((tmp_path / "run" / "pieces").glob("*.json"))  # every unit merged from its pieces
    assert not list((tmp_path / "run" / "claims").glob("*.claim"))  # and every claim given back


def test_local_workers_of_one_command_give_the_same_bytes_as_one_worker(one_worker, suite_file, tmp_path):
    """``--workers 2``: this process is worker 0 and starts worker 1 (as a run on a GPU does by default)."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "bench", "run", "--suite", str(suite_file), "--out", str(out), "--device", "cpu"]
    proc = subprocess.run([*args, "--workers", "2", "--no-progress", "--no-report"], capture_output=True, text=True,
                          timeout=600, env=ONE_THREAD)  # fmt: skip
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]
    _same_results(one_worker, out)
    assert not list((out / "claims").glob("*.claim"))


def test_workers_must_be_auto_or_a_count(tmp_path, capsys):
    argv = ["run", "--models", "cnn_mnist", "--methods", "gradient", "--metrics", "entropy", "--out", str(tmp_path)]
    for bad in ("0", "many"):
        assert main([*argv, "--workers", bad]) == 2
        assert (
            f"--workers must be auto or a number >= 1, got {bad if bad == '0' else repr(bad)}"
            in capsys.readouterr().err
        )


def test_a_run_stopped_after_two_pieces_resumes_on_three_workers_and_reuses_them(one_worker, tmp_path, monkeypatch):
    torch_threads = pytest.importorskip("torch").get_num_threads()
    pytest.importorskip("torch").set_num_threads(1)  # the bytes of the one-worker run (OMP_NUM_THREADS=1)
    try:
        suite, out, real, calls = build_suite(SUITE), tmp_path / "run", work.evaluate_unit, []

        def stop_at_the_third(unit, metrics):
            if len(calls) == 2:
                raise KeyboardInterrupt
            calls.append(unit.rank)
            return real(unit, metrics)

        monkeypatch.setattr(work, "evaluate_unit", stop_at_the_third)
        with pytest.raises(KeyboardInterrupt):
            runner.run(suite, out, device="cpu", progress=False)
        assert len(list((out / "pieces").glob("*.json"))) == 2 and not list((out / "claims").glob("*.claim"))
        table, running = run_status(out, resolve(suite))
        assert table[["units", "done", "pieces done", "running", "stale", "left"]].values.tolist() == [
            [3, 0, 2, 0, 0, 7]
        ]
        assert running == []

        resumed: list[int] = []

        def count(unit, metrics):
            resumed.append(unit.rank)
            return real(unit, metrics)

        monkeypatch.setattr(work, "evaluate_unit", count)
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                runner.run(suite, out, "cpu", False)
            except BaseException as exc:  # a worker's failure fails the test (a thread's would only warn)
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert errors == []
        total = 3 * 3  # (2 methods + 1 control) x 3 pieces
        assert len(resumed) == total - 2  # the two finished pieces were reused, no piece was computed twice
        _same_results(one_worker, out)
    finally:
        pytest.importorskip("torch").set_num_threads(torch_threads)


def test_a_piece_another_worker_merged_away_is_not_computed_again(one_worker, tmp_path, monkeypatch):
    """A worker that saw a unit unfinished, then found its pieces gone because another worker merged them (the merge
    saves the unit, then deletes the pieces), computed them again and left them behind (seen once in CI, 3 workers).
    The worker's stale view is replayed: each unit reads as unfinished once, in a finished run folder."""
    out = tmp_path / "run"
    shutil.copytree(one_worker, out)
    real_load, seen, computed = RunStore.load_unit, set(), []

    def stale_once(store, model, method, key):
        if (model, method) not in seen:
            seen.add((model, method))
            return None
        return real_load(store, model, method, key)

    monkeypatch.setattr(RunStore, "load_unit", stale_once)
    monkeypatch.setattr(work, "evaluate_unit", lambda unit, metrics: computed.append(unit.rank))
    runner.run(build_suite(SUITE), out, "cpu", False)
    assert computed == [] and not list((out / "pieces").glob("*.json"))
    _same_results(one_worker, out)


SLOW_PLUGIN = """
import os, time
from faithbench.attributions import register_method
from faithbench.attributions.gradients import Gradient


@register_method
class SlowGradient(Gradient):
    name = "slow_gradient"
    description = "the gradient, after a long wait while the file named by $SLOW_MARKER exists"

    def _attribute(self, model, inputs, targets):
        while os.path.exists(os.environ.get("SLOW_MARKER", "")):
            time.sleep(0.2)
        return super()._attribute(model, inputs, targets)
"""


def test_a_worker_killed_while_it_holds_a_claim_does_not_block_the_run(tmp_path):
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    suite = tmp_path / "slow.toml"
    suite.write_text(
        TOML.replace('methods = ["gradient", "input_x_gradient"]', 'methods = ["slow_gradient"]')
        .replace('controls = ["random"]', "controls = false")
        .replace("pieces = 3", "pieces = 2")
    )
    suite.write_text('plugins = ["slow_plugin"]\n' + suite.read_text())
    marker, out = tmp_path / "hold", tmp_path / "run"
    marker.touch()
    env = {**ONE_THREAD, "SLOW_MARKER": str(marker)}  # the plugin: found beside the suite file
    args = [sys.executable, "-m", "bench", "run", "--suite", str(suite), "--out", str(out)]
    args += ["--no-progress", "--no-report", "--device", "cpu"]
    first = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not list((out / "claims").glob("*.claim")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list((out / "claims").glob("*.claim")), "the first worker never claimed a piece"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    marker.unlink()  # the second worker's pieces run at once
    second = subprocess.run(
        args, env={**env, "FAITHBENCH_CLAIM_STALE_S": "2"}, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr[-3000:]
    results = pd.read_csv(out / "results.csv")
    assert set(results["method"]) == {"slow_gradient"} and (results["n"] > 0).all()
    assert not list((out / "claims").glob("*.claim"))


def test_a_dry_run_prints_the_plan_and_computes_nothing(suite_file, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--suite", str(suite_file), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "1 models x 3 methods and controls" in text and "3 piece(s) per unit" in text
    assert "9 pieces in all" in text and not out.exists()


def test_status_names_a_live_claim_and_its_worker(one_worker, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(one_worker, out)
    (out / "units" / "cnn_mnist__gradient.json").unlink()  # a unit not done yet ...
    holder = Claims(out / "claims", stale_s=60)
    try:
        assert holder.claim("cnn_mnist__gradient.1of3")  # ... one of its pieces being computed
        assert main(["status", str(out)]) == 0
    finally:
        holder.close()
    text = capsys.readouterr().out
    assert "2 of 3 units done" in text and "1 running" in text and "2 left" in text
    assert f"running cnn_mnist__gradient.1of3: {holder.worker}" in text


def test_a_job_array_of_three_tasks_through_submitit_gives_the_same_bytes(one_worker, suite_file, tmp_path):
    pytest.importorskip("submitit")
    out = tmp_path / "run"
    args = [sys.executable, "-m", "bench", "run", "--suite", str(suite_file), "--out", str(out), "--device", "cpu"]
    args += ["--launcher", "submitit", "--slurm-cluster", "local", "--tasks", "3", "--wait", "--no-report"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env=ONE_THREAD)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "submitted 3 workers" in proc.stdout and "task 0: wrote the run's tables" in proc.stdout
    _same_results(one_worker, out)


def test_more_pieces_than_items_leaves_the_extra_pieces_empty(tmp_path):
    """Issue 50: 6 pieces of 4 samples (and 3 grids) crashed in the fifth piece; the pieces beyond the items are
    empty, and the scores are those of 4 pieces, one item each."""
    scores = {}
    for pieces in (4, 6):
        suite = build_suite({**SUITE, "methods": ["gradient"], "controls": [], "n_samples": 4, "pieces": pieces})
        frame = runner.run(suite, tmp_path / str(pieces), "cpu", False)
        scores[pieces] = frame.set_index("metric")[["mean", "n"]]
    assert scores[6]["n"].to_dict() == {"gridpg": 27, "pixel_deletion": 4, "entropy": 4}
    pd.testing.assert_frame_equal(scores[4], scores[6])


def test_a_piece_without_any_of_a_metrics_samples_scores_nothing_there(tmp_path):
    """Randomisation explains the first of the samples only: with more pieces than those, some pieces hold none of
    them (this crashed in ``torch.cat`` of no maps); the scores are those of one piece."""
    import faithbench

    frames = {
        pieces: faithbench.benchmark(["cnn_mnist"], ["gradient"], ["randomisation", "entropy"], n_samples=4,
                                     pieces=pieces, randomisation={"n_samples": 2, "n_depths": 2},
                                     out=tmp_path / str(pieces)).set_index("metric")[["mean", "n", "params"]]
        for pieces in (1, 6)
    }  # fmt: skip
    pd.testing.assert_frame_equal(frames[1], frames[6])  # params too: the unit's 2 samples, not a piece's (compare)


@pytest.mark.parametrize(
    "option", [["--slurm-time", "-5"], ["--tasks", "0"], ["--slurm-mem-gb", "0"], ["--slurm-gpus-per-task", "-1"]]
)
def test_invalid_slurm_settings_are_refused_before_anything_is_submitted(tmp_path, capsys, option):
    argv = ["run", "--models", "cnn_mnist", "--methods", "gradient", "--metrics", "entropy", "--launcher", "submitit"]
    assert main([*argv, *option, "--out", str(tmp_path / "run")]) == 2
    assert f"error: {option[0]} must be at least" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_status_counts_only_pieces_whose_files_hold_a_piece(one_worker, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(one_worker, out)
    (out / "units" / "cnn_mnist__gradient.json").unlink()
    folder = out / "pieces"
    folder.mkdir(exist_ok=True)
    for piece in folder.glob("cnn_mnist__gradient.*"):
        piece.unlink()
    record = {"key": "k", "model": "cnn_mnist", "job": "gradient", "piece": 0, "of": 3, "metrics": {}}
    (folder / "cnn_mnist__gradient.0of3.json").write_text(__import__("json").dumps(record))
    (folder / "cnn_mnist__gradient.1of3.json").write_text('{"key": "k", "mod')  # torn
    (folder / "cnn_mnist__gradient.2of3.json").write_bytes(b"\0" * 64)  # zero-filled
    assert main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pieces: 1 done" in text and "2 left" in text
