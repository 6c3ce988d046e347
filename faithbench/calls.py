"""Model calls in chunks, one way for methods, metrics and adapters: a chunk that runs out of memory is tried again
smaller.

:func:`in_chunks` runs ``call(start, stop)`` over ``rows`` rows in chunks of at most ``most`` rows (or of the size this
process found for ``key`` before: the same model, method, input shape, with or without gradients). A chunk that runs
out of device memory (``torch.cuda.OutOfMemoryError``; cuDNN's not-supported error, which large batches raise; the
CPU allocator's "can't allocate memory") is tried again, with the allocator's cache emptied, at the next size of a
fixed ladder (``most``, ``most // 2``, ... 1: the same sizes from run to run), and that size is kept for ``key``. A
single row that does not fit is one line (:class:`~faithbench.errors.UserError`). The sizes found are cost, not
protocol: a method's maps do not depend on how its inputs were chunked (tested), and the run records them per unit
(:func:`found_sizes`).

Where the ladder starts (:func:`call_rows`, a suite's ``max_batch``): a number as given; ``auto`` :data:`CPU_ROWS` on
the CPU (there a call's time goes with its size, and small calls stay in the caches) and :data:`GPU_ROWS` on a GPU
(where a small model's call is thousands of small kernels whatever its size, so time goes with the number of calls):
the device finds what fits by trying, nothing predicts it.

It lives at the package root, below the layers, because methods, metrics and adapters all call it.
"""

from __future__ import annotations

import contextvars
import gc
import itertools
import sys
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

import torch

from faithbench.errors import UserError

T = TypeVar("T")

AUTO = "auto"  # a suite's max_batch: CPU_ROWS on the CPU, from GPU_ROWS down on a GPU
CPU_ROWS = 256
GPU_ROWS = 16384

_FOUND: dict[Hashable, int] = {}
_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a callable -> the name its calls are keyed by
_NUMBERS = itertools.count(1)  # the size that worked after stepping down, per key (this process)
_SIZE: contextvars.ContextVar[int | None] = contextvars.ContextVar("chunk_rows", default=None)
_OOM_TEXT = ("out of memory", "CUDNN_STATUS_NOT_SUPPORTED", "can't allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a call did not fit in memory (and a smaller one may)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(text in str(exc) for text in _OOM_TEXT)


def call_rows(max_batch: int | str, device: torch.device | str) -> int:
    """The most inputs per model call under a suite's ``max_batch`` on ``device`` (the top of the ladder)."""
    if max_batch != AUTO:
        return int(max_batch)
    return GPU_ROWS if torch.device(device).type == "cuda" else CPU_ROWS


def ladder(most: int, below: int) -> int:
    """The largest size of the ladder ``most, most // 2, ..., 1`` below ``below`` (at least 1)."""
    size = most
    while size >= below and size > 1:
        size //= 2
    return max(size, 1)


def in_chunks(call: Callable[[int, int], T], rows: int, most: int, *, key: Hashable | None = None) -> list[T]:
    """``[call(start, stop), ...]`` over ``range(rows)`` in chunks of at most ``most`` rows, in order; a chunk out of
    memory is retried at the next size of the ladder below it (kept for ``key``, when given, for later calls)."""
    if most < 1:
        raise ValueError(f"most must be >= 1 rows per call, got {most}")
    size = min(most, _FOUND.get(key, most)) if key is not None else most
    out: list[T] = []
    start, retried = 0, False
    while start < rows:
        stop = min(start + size, rows)
        token = _SIZE.set(size)
        try:
            out.append(call(start, stop))
        except Exception as exc:  # noqa: BLE001 - only memory errors are caught; the rest is raised as it came
            if not out_of_memory(exc):
                raise
            failed, reason = stop - start, str(exc).splitlines()[0][:200]
        else:
            start, retried = stop, False
            continue
        finally:
            _SIZE.reset(token)
        # outside the except block: the error's frames (and the tensors they hold) are released before retrying
        _release()
        if failed < size and not retried:  # a short last chunk where full ones fit: the cache's, once more as it was
            retried = True
            continue
        if failed == 1:
            raise UserError(
                f"one row ({_label(key)}) does not fit in memory ({reason}); free the device (other processes), "
                "use a smaller model or input, or run on another device"
            )
        size, retried = ladder(most, failed), False
        if key is not None:
            _FOUND[key] = size
        print(f"[faithbench] {_label(key)}: out of memory at {failed} rows; {size} per call now", file=sys.stderr)
    return out


def current_size() -> int | None:
    """The chunk size of the innermost :func:`in_chunks` running now (None outside one): a call's own inner
    chunking (a method's passes) follows it down."""
    return _SIZE.get()


def call_key(fn: Callable, shape: tuple[int, ...], kind: str) -> tuple:
    """The key of calls of ``fn`` (a model's module: its model's name, :func:`name_calls`; another callable: its type
    and a number of its own, never reused while it lives) on inputs of ``shape``, ``kind`` "with" or "without
    gradients"."""
    try:
        name = _NAMES.get(fn) or _NAMES.setdefault(fn, f"{type(fn).__name__} #{next(_NUMBERS)}")
    except TypeError:  # not weakly referable: by identity
        name = f"{type(fn).__name__} {id(fn):x}"
    return (name, "model", shape, f"{kind} gradients")


def name_calls(module: Callable, name: str) -> None:
    """Key ``module``'s calls by ``name`` (a model adapter names its module)."""
    _NAMES[module] = name


def found_sizes() -> dict[str, int]:
    """The sizes stepped down to so far in this process, by key (as text): what a run records per unit."""
    return {_label(k): v for k, v in _FOUND.items()}


def forget_sizes() -> None:
    """Forget the sizes found (a test's fresh start; a new device)."""
    _FOUND.clear()


def _label(key: Hashable | None) -> str:
    if key is None:
        return "a call"
    return " ".join(str(part) for part in key) if isinstance(key, tuple) else str(key)


def _release() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
