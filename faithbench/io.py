"""Atomic file writes: a temporary file in the same folder, then a rename, so a killed process
never leaves a half-written result or checkpoint. The temporary name is unique to the write (not only to the process):
the workers of a run may be threads of one process, or processes on hosts whose process ids coincide."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any

from faithbench.errors import UserError


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:12]}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:  # a full or read-only disk: no partial temporary file stays behind, the error names the file
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except BaseException:  # an interrupt: the same
        tmp.unlink(missing_ok=True)
        raise


def writable_folder(folder: Path, what: str, fix: str = "choose a writable folder with --out (out= in Python)") -> Path:
    """``folder``, made if missing; a :class:`UserError` that names it and ``what`` was to be written there when it
    cannot be written (a read-only disk, no permission), before any work that would be lost; ``fix`` says what to do."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
        reason = "not writable"
    except OSError as exc:
        writable, reason = False, exc.strerror
    if not writable:
        raise UserError(f"cannot write {what} to {folder} ({reason}); {fix}")
    return folder


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def load_torch(path: Path) -> Any:
    """A file ``torch.save`` wrote, on the CPU, tensors and plain containers only (torch is imported here, not at the
    top: the modules that read result tables import this one, and ``compare`` must not wait for torch)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def atomic_torch_save(path: Path, obj: Any) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())
