"""The run walks its plan: once the suite is resolved (``resolve``), a job's step consults no registry and no suite
lookup; it goes work -> plan's job -> store (resume check) -> claims -> evaluate -> metrics -> pieces -> store ->
example, and the runner turns the work's events into progress and writes."""

import collections
import sys
from pathlib import Path

from faithbench.bench.run import runner
from faithbench.bench.run.suite import load_suite, with_overrides
from faithbench.bench.run.work import Work

BENCH = Path(runner.__file__).resolve().parents[1]  # bench/
ROOT = BENCH.parent


def _rel(path: str) -> str | None:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return None


def test_a_job_enters_no_registry_and_no_suite_lookup(tmp_path, monkeypatch):
    walks = []
    real = Work._unit

    def traced(self, name, job, *args, **kwargs):
        entered = collections.Counter()

        def profile(frame, event, arg):
            if event == "call" and frame.f_back is not None:
                here, caller = _rel(frame.f_code.co_filename), _rel(frame.f_back.f_code.co_filename)
                if here and caller and here != caller and caller.startswith("bench/"):
                    entered[f"{here}:{frame.f_code.co_name}"] += 1

        sys.setprofile(profile)  # the job's steps, and the runner's handling of the events they yield
        try:
            return (yield from real(self, name, job, *args, **kwargs))
        finally:
            sys.setprofile(None)
            walks.append((job.name, entered))

    monkeypatch.setattr(Work, "_unit", traced)
    # The writer's periodic flush (every FLUSH_EVERY_S) may fall inside a job on a loaded machine; it is the
    # writer's step, not the job's: only the final flush here.
    monkeypatch.setattr(runner, "FLUSH_EVERY_S", float("inf"))
    suite = with_overrides(
        load_suite("smoke"),
        models=["bcos_cnn_mnist"],
        methods=["gradient", "native"],
        n_samples=4,
        controls=[],
        tiers=[],
    )
    runner.run(suite, tmp_path / "run", device="cpu", progress=False)
    assert [name for name, _ in walks] == ["gradient", "native"]
    for name, entered in walks:
        lookups = [s for s in entered if s.startswith(("faithbench/registry.py", "bench/run/data.py"))]
        assert not lookups, (name, lookups)
        suite_calls = {s for s in entered if s.startswith("bench/run/suite.py")}
        assert suite_calls <= {"bench/run/suite.py:to_dict"}, (name, suite_calls)  # the store records the suite
        # the data path, in modules: each step of the job is one of these, and the metrics are reached only
        # through evaluate (and the example through examples.py)
        rooms = {s.split(":")[0] for s in entered if s.startswith("bench/")}
        assert rooms <= {
            "bench/run/plan.py",
            "bench/store/results.py",
            "bench/store/tidy.py",  # the result rows of each finished unit, for the tables
            "bench/store/export.py",  # ... and results.json, rewritten with them
            "bench/store/pieces.py",
            "bench/store/claims.py",
            "bench/store/unit_files.py",  # what the folder lets the worker do next (claim, save, merge)
            "bench/run/work.py",  # the worker's own state (its outcome, read by the writer)
            "bench/run/runner.py",  # the writer and the progress, handling the work's events
            "bench/run/evaluate.py",
            "bench/run/counters.py",  # the meter of the model's calls
            "bench/run/fingerprints.py",  # the identical-maps check's fingerprint of the unit
            "bench/store/identity.py",
            "bench/store/examples.py",
            "bench/run/pairing.py",
            "bench/run/suite.py",
        }, (name, rooms)
    assert (tmp_path / "run" / "examples" / "bcos_cnn_mnist__native.pt").exists()  # the run saved the example


def test_the_work_takes_no_callbacks():
    """The run flows one way: the worker and its file work hold no callable of the runner's (the work yields events,
    the runner handles them)."""
    import dataclasses

    from faithbench.bench.store.unit_files import UnitFiles

    for cls in (Work, UnitFiles):
        held = [f.name for f in dataclasses.fields(cls) if "Callable" in str(f.type) or "Manager" in str(f.type)]
        assert not held, (cls.__name__, held)
