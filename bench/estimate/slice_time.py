"""A run's time before it runs, scaled from a slice of it that ran (``bench run --dry-run --times-from DIR``).

The dry run counts model inputs and calls (:mod:`faithbench.bench.estimate.counts`); what they cost depends on the
model, the method, the device and the batch sizes, so a time needs a measurement: a slice of the same suite run on the
machine that will run it, with fewer samples and grids (``--n-samples 8 --n-grids 4``). A (model, method) unit that
took ``s`` seconds in the slice (its pieces' seconds) is estimated in the full suite at

    t_inputs = s * inputs_full / inputs_slice,        t_calls = s * calls_full / calls_slice

(the estimate's model inputs and model calls of the unit; a model's shared work, its grid selection and NAOPC
bounds, counted with its first unit, where the run pays it). A unit's time goes with its calls where each call is
small (a 28 px model: the time is per-call overhead, on a CPU and more so on a GPU) and with its inputs where calls
are large; the estimate is the mean of the two, and the two totals bracket it. Measured on the 2-core CPU: a slice
of ``vision`` (8 samples, 4 grids; 2 min 47 s of units) gave 7 min 53 s by calls, 12 min 09 s by inputs and 10 min
01 s between; the full suite's units took 9 min 53 s.

A unit of the plan that the slice's own plan had but that left no rows there was refused when its model loaded (its
rules need layers the model lacks): 0 s. A unit the slice did not plan takes the median seconds per input of the
same method on the slice's models, else of its model's units there (named in the output). A unit of no estimated
inputs (the oracle) keeps the slice's seconds. Not counted: loading the models, building zoo models, writing the
report; ``t`` is one worker's compute time, which several workers on one device share at best.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from faithbench.bench.estimate.counts import Estimate, estimate
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.suite import Suite, recorded_suite
from faithbench.bench.store.results import read_results
from faithbench.errors import UserError
from faithbench.progress import clock_text

SLICE_COLUMNS = ("model", "method", "metric", "piece_time_s", "pieces", "device")
KINDS = ("inputs", "calls")


@dataclass(frozen=True)
class TimeEstimate:
    """``units``: per (model, method) its estimated seconds if time goes with the model ``inputs``, with the model
    ``calls``, and their mean ``seconds``, and its ``basis`` (``slice``: scaled from the same unit; ``refused``: the
    slice's model refused the method; ``method`` / ``model``: from the slice's median rate of that kind; ``none``: no
    basis); ``slice_seconds``: what the slice's units took in all; ``device``: where the slice ran."""

    units: pd.DataFrame
    slice_seconds: float
    device: str

    @property
    def seconds(self) -> float:
        return float(self.units["seconds"].sum())

    def bracket(self) -> tuple[float, float]:
        """(total by calls, total by inputs)."""
        return float(self.units["calls"].sum()), float(self.units["inputs"].sum())

    def by_model(self) -> pd.Series:
        return self.units.groupby("model", sort=False)["seconds"].sum()


def unit_work(cost: Estimate) -> pd.DataFrame:
    """Per (model, method) the estimated model ``inputs`` and ``calls``, a model's shared and before-any-unit work
    added to its first unit (where the run pays it)."""
    units = cost.units[["model", "method"]].copy()
    shared = cost.models.set_index("model")
    first = ~units["model"].duplicated()
    for kind in KINDS:
        extra = units["model"].map(shared[f"shared {kind}"] + shared[f"before {kind}"]).fillna(0)
        units[kind] = cost.units[f"model {kind}"] + extra.where(first, 0)
    return units


def slice_seconds(folder: Path) -> tuple[pd.DataFrame, str]:
    """(per (model, method) of the run in ``folder`` its ``seconds``, the device it ran on)."""
    frame = read_results(folder / "results.csv", required=SLICE_COLUMNS)
    units = frame.groupby(["model", "method"], sort=False).agg(
        longest=("piece_time_s", "first"), pieces=("pieces", "first"), device=("device", "first")
    )
    # piece_time_s is the unit's longest piece: its pieces together took about that many times the longest
    units["seconds"] = units["longest"].astype(float) * units["pieces"].astype(float)
    devices = sorted({str(d) for d in units["device"]})
    return units[["seconds"]].reset_index(), ", ".join(devices)


def time_from_slice(suite: Suite, folder: Path, n_images: int | None = None) -> TimeEstimate:
    """The time of running ``suite``, scaled from the finished run (a slice of it) in ``folder``; ``n_images``: the
    evaluation set's size (the work per image, a grid selection, is then counted in both)."""
    run_json = folder / "run.json"
    if not run_json.exists():
        raise UserError(
            f"--times-from {folder}: no run.json there (a finished run's folder, e.g. a slice of the suite)"
        )
    sliced = recorded_suite(json.loads(run_json.read_text()), run_json)
    measured, device = slice_seconds(folder)
    on = {"n_images": n_images, "device": "cuda" if "cuda" in device else "cpu"}
    planned = unit_work(estimate(resolve(sliced), **on))
    before = planned.merge(measured, on=["model", "method"], how="inner")
    if before.empty:
        raise UserError(f"--times-from {folder}: the run there shares no (model, method) unit with suite {suite.name}")
    before["rate"] = before["seconds"] / before["inputs"].where(before["inputs"] > 0)
    refused = set(zip(planned["model"], planned["method"], strict=True)) - set(
        zip(before["model"], before["method"], strict=True)
    )
    rows = []
    for unit in unit_work(estimate(resolve(suite), **on)).itertuples(index=False):
        same = before[(before["model"] == unit.model) & (before["method"] == unit.method)]
        if len(same):
            s = float(same["seconds"].iloc[0])
            # scaled by each kind of work; a unit of no inputs (the oracle) takes as long as in the slice
            times = {k: s * getattr(unit, k) / same[k].iloc[0] if same[k].iloc[0] > 0 else s for k in KINDS}
            basis = "slice"
        elif (unit.model, unit.method) in refused:
            times, basis = dict.fromkeys(KINDS, 0.0), "refused"
        else:
            seconds, basis = _borrowed(before, unit.model, unit.method, unit.inputs)
            times = dict.fromkeys(KINDS, seconds)
        rows.append({"model": unit.model, "method": unit.method, **times, "basis": basis})
    units = pd.DataFrame(rows, columns=["model", "method", *KINDS, "basis"])
    units.insert(2, "seconds", (units["inputs"] + units["calls"]) / 2)
    return TimeEstimate(units, float(measured["seconds"].sum()), device)


def _borrowed(before: pd.DataFrame, model: str, method: str, inputs: int) -> tuple[float, str]:
    """A unit the slice lacks: the median seconds per input of its method on the slice's models, else its model's."""
    for key, column in ((method, "method"), (model, "model")):
        rates = before.loc[before[column] == key, "rate"].dropna()
        if len(rates):
            return float(rates.median()) * inputs, column
    return 0.0, "none"


def _named(units: pd.DataFrame, limit: int | None = 6) -> str:
    """``model/method`` of ``units``, the first ``limit`` (None: all), then how many more."""
    names = [f"{m}/{j}" for m, j in zip(units["model"], units["method"], strict=True)]
    shown = names if limit is None else names[:limit]
    return ", ".join(shown) + (f" and {len(names) - len(shown)} more" if len(names) > len(shown) else "")


def other_device(folder: Path, device: str) -> str | None:
    """Why the slice in ``folder`` cannot time a plan for ``device`` (``cpu`` / ``cuda``): it ran on the other kind
    (None: it ran on this kind, or has no results to say)."""
    ran_on = slice_seconds(folder)[1] if (folder / "results.csv").exists() else device
    if ("cuda" in ran_on) == (device == "cuda"):
        return None
    return (
        f"time: none for {device}: the slice in {folder} ran on {ran_on}, and its seconds say nothing of {device}'s; "
        f"time a slice there (e.g. --n-samples 8 --n-grids 4 --device {device}) and pass that folder"
    )


def time_lines(
    suite: Suite,
    folder: Path,
    n_images: int | None = None,
    device: str = "cpu",
) -> list[str]:
    """The dry run's lines on time: the total and per model, and which units are borrowed or missing. ``device``: the
    kind the plan is for (``cpu`` / ``cuda``): a slice timed on another kind gives no time (a CPU's seconds say nothing
    of a GPU's), and a total that leaves units out is a lower bound, headlined as one."""
    other = other_device(folder, device)
    if other:
        return [other]
    est = time_from_slice(suite, folder, n_images)
    per_model = ", ".join(f"{m} {clock_text(s)}" for m, s in est.by_model().items())
    by_calls, by_inputs = est.bracket()
    total, took = clock_text(est.seconds), clock_text(est.slice_seconds)
    missing = est.units[est.units["basis"] == "none"]
    bound = f"≥ {total} (a lower bound: {len(missing)} of {len(est.units)} units have no basis there)" if len(
        missing) else f"≈ {total}"  # fmt: skip
    lines = [
        f"time {bound} of compute on {est.device} (one worker; {clock_text(by_calls)} if it goes with the model "
        f"calls, {clock_text(by_inputs)} if with the model inputs), scaled from the run in {folder} (its units took "
        f"{took}); per model: {per_model}",
        "  not counted: loading the models, building zoo models, the report",
    ]
    for basis, what in (("method", "its method's"), ("model", "its model's")):
        borrowed = est.units[est.units["basis"] == basis]
        if len(borrowed):
            lines.append(f"  ~ {len(borrowed)} unit(s) not in that run, timed at {what} median rate there: "
                         f"{_named(borrowed)}")  # fmt: skip
    if len(missing):
        lines.append(f"  {len(missing)} unit(s) with no basis in that run (not counted): {_named(missing, None)}")
    return lines
