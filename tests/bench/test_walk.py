"""The run walks its plan: once the suite is resolved (``plan``), a job's step consults no registry and no suite
lookup; it goes work -> plan's job -> store (resume check) -> claims -> evaluate -> metrics -> pieces -> store ->
example. And the walk of the plan itself -- every call from one ``bench/`` module into another that hands on the
suite or the plan (or an object holding one) -- is short: each module entered from at most two places."""

import collections
import sys
from pathlib import Path

from faithbench.bench.run import runner
from faithbench.bench.run.plan import Plan
from faithbench.bench.run.suite import Suite, load_suite, with_overrides
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

        sys.setprofile(profile)
        try:
            return real(self, name, job, *args, **kwargs)
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
            "bench/run/work.py",  # the worker's own state (entered back from the writer's callbacks)
            "bench/run/runner.py",  # the writer and the progress, told of each finished unit
            "bench/run/evaluate.py",
            "bench/run/counters.py",  # the meter of the model's calls
            "bench/run/fingerprints.py",  # the identical-maps check's fingerprint of the unit
            "bench/store/identity.py",
            "bench/store/examples.py",
            "bench/run/pairing.py",
            "bench/run/suite.py",
        }, (name, rooms)
    assert (tmp_path / "run" / "examples" / "bcos_cnn_mnist__native.pt").exists()  # the run saved the example


def _carries_the_plan(value, depth=1) -> bool:
    if isinstance(value, Suite | Plan):
        return True
    if depth and hasattr(value, "__dict__") and not isinstance(value, type):
        return any(_carries_the_plan(v, depth - 1) for v in vars(value).values())
    return False


def test_the_walk_of_the_plan_is_short(tmp_path, monkeypatch):
    """The review's walk, taken at run time on one model and one job: the calls between ``bench/`` modules that
    pass the suite or the plan on (as an argument, an object holding it as an attribute -- the worker, the writer
    -- or a callback's closure). It was 57 stops over 20 files with ``work.py`` entered 8 times (architecture
    review at 90ec9f6); the plan now carries what the walk needs (tiers, run id, the suite's record, the example
    metric), the worker's file work (:mod:`faithbench.bench.store.unit_files`) needs no plan and calls nothing
    back but the writer's start, and the writer reads the worker's outcome through one callback."""
    stops = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        here, caller = _rel(frame.f_code.co_filename), _rel(frame.f_back.f_code.co_filename)
        if not (here and caller and here != caller and here.startswith("bench/") and caller.startswith("bench/")):
            return
        code = frame.f_code
        # its arguments and, for a callback, what its closure holds
        names = (*code.co_varnames[: code.co_argcount + code.co_kwonlyargcount], *code.co_freevars)
        if any(_carries_the_plan(frame.f_locals.get(n)) for n in names):
            stops.append((f"{caller}:{frame.f_back.f_code.co_name}", f"{here}:{code.co_name}"))

    monkeypatch.setattr(runner, "FLUSH_EVERY_S", float("inf"))
    suite = with_overrides(
        load_suite("smoke"), models=["bcos_cnn_mnist"], methods=["gradient"], n_samples=4, controls=[], tiers=[]
    )
    sys.setprofile(profile)
    try:
        runner.run(suite, tmp_path / "run", device="cpu", progress=False)
    finally:
        sys.setprofile(None)
    assert (tmp_path / "run" / "results.csv").exists()
    distinct = list(dict.fromkeys(stops))
    assert len(stops) <= 20, stops
    entries = collections.Counter(callee.split(":")[0] for _, callee in distinct)
    assert max(entries.values()) <= 2, entries  # each module entered from at most two places
    assert entries["bench/run/plan.py"] == 1, entries  # resolved once, then read
