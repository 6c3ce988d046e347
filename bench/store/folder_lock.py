"""One writer per run folder: an exclusive ``flock`` on ``RUN/.lock`` -- or the workers of one run, together.

The operating system releases the lock when its process ends, however it ends (``kill -9`` and a
crashed node included), so a killed run never leaves a folder stuck; a second run (or ``rescore``)
into a folder that a live process holds stops at once, before any compute, with one line naming the
holder. The lock file stays behind (unlinking it would let two processes lock two different files);
its content is only the last holder's description. On NFS, Linux emulates ``flock`` with POSIX
locks, which lockd serves across hosts.

The workers of one run (torchrun ranks, the tasks of a job array, a second ``bench run`` of the same suite) share
the folder: each holds a *shared* lock, and a worker joins only a folder whose holders run the same computation
(the ``run_id`` the first one recorded: the suite's settings and the code, :func:`faithbench.bench.run.plan.run_id`).
Another run, and every command that needs the folder to itself (``rescore``), stops with the holder named.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from faithbench.errors import UserError

LOCK_NAME = ".lock"


def check_output_folder(out: Path) -> None:
    """A one-line error when ``out`` cannot hold a run: an existing file, or a folder that cannot be written."""
    out = Path(out)
    for parent in (out, *out.parents):
        if parent.exists() and not parent.is_dir():
            raise UserError(f"--out {out}: {parent} is a file, not a folder; choose a folder for the run")
        if parent.exists():
            break


class FolderLock:
    """Exclusive ownership of a run folder for one process (``with FolderLock(out, "run"): ...``)."""

    def __init__(self, folder: Path, purpose: str, run_id: str | None = None, *, reading: bool = False) -> None:
        # reading: the holder only reads the folder; one that cannot be written here (a read-only disk) needs no lock
        self.folder, self.purpose, self.run_id, self.reading = Path(folder), purpose, run_id, reading
        self.path = self.folder / LOCK_NAME
        self.created_folder = False
        self._created: list[Path] = []  # the folder and the parents this lock made, innermost first
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        check_output_folder(self.folder)
        try:
            self._created = [p for p in (self.folder, *self.folder.parents) if not p.exists()]
            self.created_folder = bool(self._created)
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if self.reading and self.folder.is_dir():
                return self
            raise UserError(
                f"cannot write to {self.folder} ({exc.strerror}); choose a writable --out (out= in Python)"
            ) from None
        if self.run_id is not None:
            return self._join(fd)
        if not _try_flock(fd, fcntl.LOCK_EX, self.path):
            os.close(fd)
            raise self._busy()
        self._own(fd)
        return self

    def _busy(self) -> UserError:
        return UserError(
            f"{self.folder} is in use by another process ({self.holder()}); wait for it to finish, "
            "or write to another folder (--out)"
        )

    def _join(self, fd: int) -> FolderLock:
        """A worker's shared lock: the first worker records the run, later ones join it if it is the same run.
        Joining is serialised on ``.lock-join`` so that two first workers cannot both record their run."""
        gate = os.open(self.folder / f"{LOCK_NAME}-join", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            if _try_flock(fd, fcntl.LOCK_EX, self.path):  # nobody holds the folder: this worker is the first
                self._own(fd)
                fcntl.flock(fd, fcntl.LOCK_SH)
                return self
            if self._owner().get("run_id") != self.run_id or not _try_flock(fd, fcntl.LOCK_SH, self.path):
                os.close(fd)
                raise self._busy()
            self._fd = fd
            return self
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
            os.close(gate)

    def _own(self, fd: int) -> None:
        owner = {
            "purpose": self.purpose,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(sys.argv),
            **({"run_id": self.run_id} if self.run_id else {}),
        }
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(owner).encode())
        self._fd = fd

    def _owner(self) -> dict:
        try:
            owner = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def holder(self) -> str:
        """The holder as its lock file describes it (written by the holder itself, after locking)."""
        owner = self._owner()
        if not owner:
            return "holder unknown"
        return (
            f"{owner.get('purpose', '?')} by pid {owner.get('pid', '?')} on {owner.get('host', '?')} "
            f"since {owner.get('since_utc', '?')}"
        )

    def release(self, *, remove_if_empty: bool = False) -> None:
        """Unlock; with ``remove_if_empty``, a folder this lock created and nothing else wrote goes too."""
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        left = {p.name for p in self.folder.iterdir()}
        if remove_if_empty and self.created_folder and left <= {LOCK_NAME, f"{LOCK_NAME}-join"}:
            for name in left:
                (self.folder / name).unlink(missing_ok=True)
            for folder in self._created:  # a refused run leaves no folder behind, nor the parents --out made
                try:
                    folder.rmdir()
                except OSError:  # something else wrote there meanwhile
                    break

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try_flock(fd: int, kind: int, path: Path) -> bool:
    """``flock(fd, kind)`` without waiting: False when another process holds a conflicting lock."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise UserError(f"cannot lock {path} ({exc.strerror})") from None
        return False
    return True
