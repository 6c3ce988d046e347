"""Who computes which piece: claims in the shared run folder, one worker per piece on any mix of hosts.

A claim is a file ``claims/PIECE.claim`` made with ``O_CREAT | O_EXCL`` (atomic on a local disk and on NFS v3+):
exactly one worker creates it. While the worker computes, a thread refreshes the file's time every
:data:`HEARTBEAT_S` seconds; a claim whose time is older than the stale limit (:data:`STALE_S`, or
``$FAITHBENCH_CLAIM_STALE_S``) belongs to a worker that died (``kill -9``, a lost node, a preempted job) and any
other worker takes it over: it renames the file to a name of its own (one rename wins), then claims afresh. Times
are compared on the folder's own clock (the time of a file the worker has just touched there), so hosts with
skewed clocks agree. A claim taken over from a worker that was only stalled costs a piece computed twice, never a
wrong result: a piece's file is written atomically and its content does not depend on who computed it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from faithbench.config import env_seconds

HEARTBEAT_S = 10.0  # how often a worker refreshes the claims it holds
STALE_S = 120.0  # a claim not refreshed for this long is a dead worker's (12 missed heartbeats)


def stale_after() -> float:
    """Seconds after which a claim is stale: ``$FAITHBENCH_CLAIM_STALE_S`` or :data:`STALE_S`."""
    return env_seconds("FAITHBENCH_CLAIM_STALE_S", STALE_S)


def worker_name() -> str:
    """``host:pid``: what a claim says about its holder (status shows it)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Claims:
    """The claims one worker holds in ``folder`` (``claims/`` of a run); a daemon thread keeps them fresh."""

    def __init__(self, folder: Path, stale_s: float | None = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stale_s = stale_after() if stale_s is None else stale_s
        self.heartbeat_s = min(heartbeat_s, self.stale_s / 4)
        self.worker = worker_name()
        self.held: set[Path] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="faithbench-claims", daemon=True)
        self._thread.start()

    def path(self, piece: str) -> Path:
        return self.folder / f"{piece}.claim"

    @property
    def probe(self) -> Path:
        return self.folder / f".clock-{self.worker.replace(':', '-')}"

    def now(self) -> float:
        """The folder's clock: the time of a file this worker has just touched there."""
        self.probe.touch()
        return self.probe.stat().st_mtime

    def age(self, piece: str) -> float | None:
        """Seconds since the piece's claim was last refreshed (None: not claimed)."""
        try:
            return self.now() - self.path(piece).stat().st_mtime
        except FileNotFoundError:
            return None

    def is_stale(self, piece: str) -> bool:
        age = self.age(piece)
        return age is not None and age > self.stale_s

    def claim(self, piece: str) -> bool:
        """Claim ``piece`` for this worker: True if it is now ours (free, or taken over from a dead worker)."""
        path = self.path(piece)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self.is_stale(piece):
                    return False
                grave = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex}")
                try:
                    os.rename(path, grave)  # one taker wins; the others find the claim gone or fresh
                except FileNotFoundError:
                    return False
                grave.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps({"worker": self.worker, "since": time.time()}))
            with self._lock:
                self.held.add(path)
            return True
        return False

    def release(self, piece: str) -> None:
        path = self.path(piece)
        with self._lock:
            self.held.discard(path)
        path.unlink(missing_ok=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            with self._lock:
                held = list(self.held)
            for path in held:
                try:
                    os.utime(path)
                except FileNotFoundError:  # taken over after a stall: the piece is computed twice, harmlessly
                    pass

    def close(self) -> None:
        """Stop the heartbeat and give back every claim still held (an interrupted piece is free again)."""
        self._stop.set()
        with self._lock:
            held, self.held = list(self.held), set()
        for path in held:
            path.unlink(missing_ok=True)
        self.probe.unlink(missing_ok=True)


def read_claims(folder: Path) -> dict[str, tuple[float, str]]:
    """Every claim in ``folder``: piece -> (seconds since its last heartbeat, by this host's clock; its worker)."""
    out = {}
    now = time.time()
    for path in Path(folder).glob("*.claim"):
        try:
            age, holder = now - path.stat().st_mtime, json.loads(path.read_text()).get("worker", "?")
        except (OSError, ValueError):
            continue
        out[path.name[: -len(".claim")]] = (age, holder)
    return out
