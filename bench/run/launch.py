"""A run's workers as a SLURM job array, through submitit (the optional extra ``faithbench[slurm]``).

Each task of the array is a worker of the same run (:mod:`faithbench.bench.run.work`): the tasks pull pieces from
the shared folder as they go, so a slow unit never holds a task that could take another one. Task 0 waits for the
others' pieces and writes the run's tables; a task that finds nothing left to claim ends. Preempted or timed out,
a task is requeued by submitit (its ``checkpoint``) and resumes where the folder stands: its claims expire
(:mod:`faithbench.bench.store.claims`) and every finished piece is kept. ``cluster="local"`` runs the array as local
processes (submitit's local executor): what the tests use, and a way to try a launch without a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithbench.bench.run.distributed import Worker
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import Suite, build_suite
from faithbench.errors import UserError

CLUSTERS = ("auto", "slurm", "local")
TASK_VARIABLE = "FAITHBENCH_ARRAY_TASK"


@dataclass(frozen=True)
class SlurmSettings:
    """What each task of the array asks the scheduler for (None: the cluster's default)."""

    tasks: int = 4
    partition: str | None = None
    gpus_per_task: int | None = None
    cpus_per_task: int | None = None
    time_min: int = 240
    mem_gb: int | None = None
    cluster: str = "auto"  # auto: SLURM where sbatch is found, else local processes

    def __post_init__(self) -> None:  # refused before anything is submitted
        counts = {"--tasks": self.tasks, "--slurm-time": self.time_min, "--slurm-gpus-per-task": self.gpus_per_task,
                  "--slurm-cpus-per-task": self.cpus_per_task, "--slurm-mem-gb": self.mem_gb}  # fmt: skip
        least = {"--slurm-gpus-per-task": 0}
        for option, value in counts.items():
            if value is not None and value < least.get(option, 1):
                raise UserError(f"{option} must be at least {least.get(option, 1)}, got {value}")

    def parameters(self, name: str) -> dict[str, Any]:
        given = {
            "name": name,
            "timeout_min": self.time_min,
            "slurm_array_parallelism": self.tasks,
            "slurm_partition": self.partition,
            "gpus_per_node": self.gpus_per_task,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
        }
        return {k: v for k, v in given.items() if v is not None}


@dataclass(frozen=True)
class ArrayTask:
    """One task of the array: a worker of the run (picklable: the suite travels as data)."""

    suite: dict[str, Any]
    folder: str | None  # the suite file's folder: its plugins are imported from there
    out: str
    device: str
    tasks: int

    def __call__(self, task: int) -> str:
        os.environ[TASK_VARIABLE] = str(task)  # which task this is, for a plugin or a log (as SLURM_ARRAY_TASK_ID)
        suite = build_suite(self.suite, "suite", Path(self.folder) if self.folder else None)
        frame = run(
            suite, Path(self.out), self.device, progress=True, worker=Worker(task, self.tasks), handle_sigterm=False
        )  # fmt: skip  (submitit's own handler requeues the task)
        return f"task {task}: " + ("wrote the run's tables" if frame is not None else "no piece left to claim")

    def checkpoint(self, task: int) -> Any:
        """Requeue this task as it was (submitit calls this on preemption or timeout)."""
        import submitit  # the optional extra: only a task that runs under submitit gets here

        return submitit.helpers.DelayedSubmission(self, task)


def submit(
    suite: Suite, out: Path, settings: SlurmSettings, device: str = "auto", folder: Path | None = None
) -> list[Any]:
    """Submit the run's workers as a job array; returns submitit's jobs (``job.result()`` waits for one)."""
    try:
        import submitit
    except ImportError:
        raise UserError(
            "--launcher submitit needs the submitit package: pip install 'faithbench[slurm]' (or submitit)"
        ) from None
    if settings.cluster not in CLUSTERS:
        raise UserError(f"unknown --slurm-cluster {settings.cluster!r}; valid: {', '.join(CLUSTERS)}")
    if settings.tasks < 1:
        raise UserError(f"--tasks must be at least 1, got {settings.tasks}")
    logs = Path(out) / "slurm"
    cluster = None if settings.cluster == "auto" else settings.cluster
    executor = submitit.AutoExecutor(folder=logs / "%j", cluster=cluster)
    executor.update_parameters(**settings.parameters(f"faithbench-{suite.name}"))
    task = ArrayTask(suite.to_dict(), str(folder) if folder else None, str(out), device, settings.tasks)
    return executor.map_array(task, range(settings.tasks))


def wait_for(jobs: list[Any], out: Path, say: Callable[[str], None]) -> None:
    """Wait for every task, telling ``say`` a line per task as it ended. A task that died (killed, out of memory, a
    node lost) is a line too, not submitit's traceback: the others take its pieces over once its claims go stale,
    and task 0 ends only when every piece is done. When task 0 died, a :class:`UserError` says that the run is not
    complete and how to resume; every finished piece is kept."""
    died = []
    for task, job in enumerate(jobs):
        try:
            say(str(job.result()))
        except Exception as exc:  # submitit's FailedJobError / UncompletedJobError, or the task's own error
            last = [line for line in str(exc).strip().splitlines() if line.strip()]
            died.append(f"task {task} (job {job.job_id}) died: {last[-1] if last else type(exc).__name__}")
            if task:
                say(died[-1])
    if died and died[0].startswith("task 0 "):
        raise UserError(
            f"{'; '.join(died)}. The run in {out} is not complete (task 0 writes its tables once every piece is done); "
            f"every finished piece is kept: submit the same command again to resume (python -m bench status {out} "
            f"shows what is left; the tasks' logs: {Path(out) / 'slurm'})"
        )
