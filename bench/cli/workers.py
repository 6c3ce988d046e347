"""``bench run --workers auto|N``: several local workers of one run, on one machine and its device(s).

The workers share the run folder as torchrun's ranks do (pieces and claims, :mod:`faithbench.bench.run.distributed`):
this process is worker 0 (it draws the progress, waits for every piece and writes the tables); workers 1..N-1 are
the same command started again with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` set, each with its share of the CPU
threads. On a GPU many small model calls leave it idle between kernels; several processes keep it busy. ``auto``:
on a GPU one worker per 4 CPU cores (at most 4), on the CPU one (the CPU's threads are busy already).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from faithbench.errors import UserError

MAX_AUTO = 4


def worker_count(value: str, device: str) -> int:
    """``--workers``: ``auto`` (see the module) or a count >= 1; 1 in a worker that a launcher started (torchrun, a
    job array's task, a worker of this option)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return 1
    if value == "auto":
        gpu = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        return min(MAX_AUTO, max(1, (os.cpu_count() or 1) // 4)) if gpu else 1
    try:
        count = int(value)
    except ValueError:
        raise UserError(f"--workers must be auto or a number >= 1, got {value!r}") from None
    if count < 1:
        raise UserError(f"--workers must be auto or a number >= 1, got {count}")
    return count


class LocalWorkers:
    """Workers 1..N-1 of this run as child processes (``with LocalWorkers(argv, n): run as worker 0``)."""

    def __init__(self, argv: Sequence[str], count: int) -> None:
        self.argv, self.count = list(argv), count
        self.children: list[tuple[subprocess.Popen, Path]] = []
        self.logs = Path(tempfile.mkdtemp(prefix="faithbench-workers-")) if count > 1 else None
        self._env: dict[str, str | None] = {}

    def __enter__(self) -> LocalWorkers:
        if self.count <= 1:
            return self
        threads = str(max(1, (os.cpu_count() or 1) // self.count))
        world = {"WORLD_SIZE": str(self.count), "LOCAL_WORLD_SIZE": str(self.count), "OMP_NUM_THREADS": threads}
        command = [sys.executable, "-c", "from faithbench.bench.cli import main; raise SystemExit(main())"]
        for rank in range(1, self.count):
            log = self.logs / f"worker-{rank}.log"
            env = {**os.environ, **world, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            with log.open("w") as f:  # the child keeps its own handle
                args = [*command, *self.argv, "--workers", "1", "--no-progress", "--no-report"]
                self.children.append((subprocess.Popen(args, env=env, stdout=f, stderr=subprocess.STDOUT), log))
        for key, value in {**world, "RANK": "0", "LOCAL_RANK": "0"}.items():  # this process: worker 0
            self._env[key] = os.environ.get(key)
            os.environ[key] = value
        torch.set_num_threads(int(threads))
        return self

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        for key, value in self._env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if kind is not None:  # interrupted or failed: the others stop too (their finished pieces are kept)
            for child, _ in self.children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
        failed = []
        for rank, (child, log) in enumerate(self.children, start=1):
            if child.wait() not in (0, 143) and kind is None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                failed.append(f"worker {rank} exited with {child.returncode}: {tail[0]} (its log: {log})")
        for line in failed:  # worker 0 finished the run: a line, not an error
            sys.stderr.write(f"warning: {line}\n")
        if self.logs is not None and not failed:
            shutil.rmtree(self.logs, ignore_errors=True)
