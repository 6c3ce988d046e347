"""Atomic file writes: a temporary file in the same folder, then a rename, so a killed process
never leaves a half-written result or checkpoint. The temporary name is unique to the write (not only to the process):
the workers of a run may be threads of one process, or processes on hosts whose process ids coincide."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:12]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


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
