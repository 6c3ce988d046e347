"""Progress in a log (plain, throttled lines with an ETA) and in a terminal (tqdm bars); a run builds its missing zoo
models first, under their own progress, so that build time never enters the units' pace."""

import io
from pathlib import Path

import pytest
import torch
from torch import nn

from faithbench.bench.cli import main
from faithbench.errors import UserError
from faithbench.models import zoo
from faithbench.models.adapter import ModelSpec
from faithbench.models.data.mnist import mnist_splits
from faithbench.models.registry import MODELS, _zoo
from faithbench.models.zoo import Recipe
from faithbench.models.zoo.training import train_classifier
from faithbench.progress import Bar, Lines, clock_text, progress_bar, progress_every, quiet


class Clock:
    """A clock the test moves by hand: no sleeps, no timed assertions."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(every: float = 30.0, total: int = 10) -> tuple[Lines, io.StringIO, Clock]:
    log, clock = io.StringIO(), Clock()
    bar = progress_bar(total=total, desc="suite s", unit="unit", file=log, every=every, clock=clock)
    assert isinstance(bar, Lines)
    return bar, log, clock


def test_a_log_gets_plain_lines_with_an_eta_and_no_redraws():
    bar, log, clock = _lines()
    for i in range(10):
        clock.now += 10.0
        bar.set_postfix_str(f"m / method{i}")
        bar.update()
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == "suite s: 0/10 units"
    assert lines[1] == "suite s: 3/10 units, 0:00:30 elapsed, ETA 0:01:10 (m / method2)"
    assert lines[-1] == "suite s: 10/10 units, done in 0:01:40"


def test_lines_are_throttled_to_one_per_interval():
    bar, log, clock = _lines(every=30.0, total=1000)
    for _ in range(300):  # 300 steps of 1 s: a line at 30, 60, ... 300 s
        clock.now += 1.0
        bar.update()
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 + 10 + 1, lines
    assert [line.split(", ")[1] for line in lines[1:-1]] == [f"{clock_text(30 * k)} elapsed" for k in range(1, 11)]


def test_the_eta_leaves_out_reused_units_and_pauses():
    bar, log, clock = _lines(every=0.0, total=10)
    bar.update(timed=False)  # four units reused from an earlier run: no time, no pace
    clock.now += 1.0
    bar.update(3, timed=False)
    with bar.paused():  # a model loads (or builds) for 100 s
        clock.now += 100.0
    for _ in range(2):  # two units computed, 10 s each: 4 left, 40 s
        clock.now += 10.0
        bar.update()
    assert bar.eta(clock.now) == pytest.approx(40.0)
    assert log.getvalue().splitlines()[-1] == "suite s: 6/10 units, 0:02:01 elapsed, ETA 0:00:40"


def test_no_timed_step_yet_says_the_eta_is_unknown():
    bar, log, clock = _lines(every=0.0)
    clock.now = 5.0
    bar.update(timed=False)
    assert log.getvalue().splitlines()[-1] == "suite s: 1/10 units, 0:00:05 elapsed, ETA unknown"


def test_a_terminal_keeps_tqdm_bars_and_quiet_or_tqdm_disable_silence_both(monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    tty = Terminal()
    bar = progress_bar(total=3, desc="x", file=tty)
    assert isinstance(bar, Bar) and not bar.disable
    bar.update(timed=False)
    with bar.paused():
        bar.update()
    bar.close()
    assert "\r" in tty.getvalue() and "2/3" in tty.getvalue()
    for silent in (tty, io.StringIO()):
        with quiet():
            assert progress_bar(total=3, file=silent).disable
        monkeypatch.setenv("TQDM_DISABLE", "1")
        assert progress_bar(total=3, file=silent).disable
        monkeypatch.delenv("TQDM_DISABLE")


def test_the_interval_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("FAITHBENCH_PROGRESS_EVERY", raising=False)
    assert progress_every() == 30.0
    monkeypatch.setenv("FAITHBENCH_PROGRESS_EVERY", "5")
    assert progress_every() == 5.0
    monkeypatch.setenv("FAITHBENCH_PROGRESS_EVERY", "soon")
    with pytest.raises(UserError, match="FAITHBENCH_PROGRESS_EVERY"):
        progress_every()


# ----------------------------------------------------------------------------- a run with a log for stderr

NAME = "tiny_progress"
SUITE = f"""
name = "progress"
dataset = "mnist"
models = ["{NAME}"]
methods = ["gradient", "input_x_gradient"]
controls = false
metrics = ["entropy"]
seed = 0
n_samples = 4
batch_size = 4
"""


def _train(model: nn.Module, deps: dict, params: dict) -> dict:
    train, _ = mnist_splits()
    small = type(train)(train.images[:256], train.labels[:256])
    train_classifier(model, zoo.STANDARD, small, epochs=1, lr=1e-3, seed=0, batch_size=64, desc=NAME)
    return {}


@pytest.fixture
def tiny_zoo_model(tmp_path, monkeypatch):
    """A zoo model that trains in 4 steps, in an empty cache."""
    monkeypatch.setenv("FAITHBENCH_CACHE", str(tmp_path / "cache"))
    architecture = lambda: nn.Sequential(nn.Flatten(), nn.Linear(784, 10))  # noqa: E731
    recipe = Recipe(
        name=NAME, family="standard", description="tiny", encoding=zoo.STANDARD, architecture=architecture,
        train=_train, params={},
    )  # fmt: skip
    zoo.RECIPES.register(NAME, recipe)
    MODELS.register(NAME, ModelSpec(name=NAME, family="standard", source="zoo", description="tiny", build=_zoo(NAME)))
    torch.manual_seed(0)
    yield
    MODELS.unregister(NAME)
    zoo.RECIPES.unregister(NAME)


def test_a_run_logs_plain_lines_the_zoo_build_first_with_its_own_progress(tiny_zoo_model, tmp_path, capfd, monkeypatch):
    """stderr is a file here (as under nohup or a cluster job): plain lines only, the build's before the units'."""
    suite = tmp_path / "progress.toml"
    suite.write_text(SUITE)
    monkeypatch.setenv("FAITHBENCH_PROGRESS_EVERY", "0")  # a line at every step
    assert main(["run", "--suite", str(suite), "--out", str(tmp_path / "run")]) == 0
    err = capfd.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    lines = err.splitlines()
    build = [i for i, line in enumerate(lines) if line.startswith(f"zoo build 1/1 {NAME}: ")]
    units = [i for i, line in enumerate(lines) if line.startswith("suite progress: ")]
    assert build and units and max(build) < min(units), err  # built before the first unit starts
    assert lines[build[0]] == f"zoo build 1/1 {NAME}: 0/4 steps"
    assert any("ETA" in lines[i] and "(loss=" in lines[i] for i in build)
    assert lines[build[-1]].startswith(f"zoo build 1/1 {NAME}: 4/4 steps, done in ")
    assert lines[units[0]] == "suite progress: 0/2 units"
    assert "ETA" in lines[units[1]] and lines[units[-1]].startswith("suite progress: 2/2 units, done in ")
    assert "[faithbench zoo] 1 model(s) to build first" in err and "[faithbench zoo] 1/1 built" in err
    assert "report: statistics" in err and "report: tables" in err  # the report step says what it does

    # Run again: the checkpoint exists, nothing is built; both units are reused and say so without an ETA.
    assert main(["run", "--suite", str(suite), "--out", str(tmp_path / "run"), "--no-report"]) == 0
    err = capfd.readouterr().err
    assert "zoo build" not in err and "model(s) to build" not in err
    assert "suite progress: 1/2 units, " in err and "ETA unknown" in err


def test_no_progress_silences_the_build_the_units_and_the_report(tiny_zoo_model, tmp_path, capfd):
    suite = tmp_path / "progress.toml"
    suite.write_text(SUITE)
    assert main(["run", "--suite", str(suite), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    err = capfd.readouterr().err
    assert "zoo build" not in err and "suite progress" not in err and "report:" not in err
    assert "built," not in err


def test_the_report_command_tells_its_steps_on_stderr(tiny_zoo_model, tmp_path, capfd):
    suite = tmp_path / "progress.toml"
    suite.write_text(SUITE)
    assert main(["run", "--suite", str(suite), "--out", str(tmp_path / "run"), "--no-progress", "--no-report"]) == 0
    capfd.readouterr()
    assert main(["report", str(Path(tmp_path / "run" / "results.csv"))]) == 0
    captured = capfd.readouterr()
    assert "report: statistics" in captured.err and "report: tables" in captured.err
    assert "report: tables" not in captured.out  # the steps go to stderr, the leaderboard to stdout
