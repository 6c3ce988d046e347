"""Progress for people and for logs: tqdm bars in a terminal, plain throttled lines anywhere else.

Under ``nohup`` or a cluster job stderr is a file, and tqdm's redraws (carriage returns; the cursor-up escapes of
nested bars) fill the log with unreadable text. There :func:`progress_bar` writes plain lines instead: one when it
starts, then at most every :data:`EVERY_S` seconds (``$FAITHBENCH_PROGRESS_EVERY``) while it advances, and one
when it ends::

    suite vision: 116/171 units, 1:40:47 elapsed, ETA 0:32:10 (resnet50 / lime)

Both kinds accept updates that do not count toward the pace (a unit reused from an earlier run, a skipped one) and
pauses (a model loading or building), so that the ETA is the time left at the pace of the work itself.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from tqdm import std
from tqdm.auto import tqdm as auto_tqdm
from tqdm.autonotebook import tqdm as notebook_or_std_tqdm

from faithbench.config import env_seconds

EVERY_S = 30.0  # seconds between two plain progress lines (the first and the last are always written)

_quiet_depth = 0


@contextmanager
def quiet() -> Iterator[None]:
    """No progress from :func:`progress_bar` inside (a non-zero torchrun rank, ``progress=False``)."""
    global _quiet_depth
    _quiet_depth += 1
    try:
        yield
    finally:
        _quiet_depth -= 1


def silenced() -> bool:
    """Inside :func:`quiet`, or ``TQDM_DISABLE`` set (``--no-progress``): tqdm reads its ``TQDM_*`` variables only
    when it is imported, so a flag set later is read here."""
    return _quiet_depth > 0 or os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")


def progress_every() -> float:
    """Seconds between plain progress lines: ``$FAITHBENCH_PROGRESS_EVERY`` or :data:`EVERY_S`."""
    return env_seconds("FAITHBENCH_PROGRESS_EVERY", EVERY_S, zero_ok=True)


def clock_text(seconds: float) -> str:
    """``H:MM:SS``."""
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def draws_bars(stream: IO[str]) -> bool:
    """Whether ``stream`` shows a bar: a terminal, or a notebook (where tqdm.auto draws a widget)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        tty = False
    return tty or notebook_or_std_tqdm is not std.tqdm


class Bar(auto_tqdm):
    """A tqdm bar with :class:`Lines`' two extras: updates outside the pace, and pauses."""

    def update(self, n: float = 1, timed: bool = True) -> bool | None:
        if timed or self.disable:
            return super().update(n)
        self.unpause()  # the time since the last redraw went to this step, not to the work
        self.n += n
        self.last_print_n += n  # nor does the step enter the next rate sample
        self.refresh()
        return True

    @contextmanager
    def paused(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.unpause()

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` just spent (a model's load) out of the pace."""
        if not self.disable:
            self.start_t += seconds
            self.last_print_t += seconds


class Lines:
    """tqdm's interface as faithbench uses it (``update``, ``set_postfix(_str)``, ``close``, iteration, ``with``),
    writing plain lines: no carriage return, no escape code."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        file: IO[str] | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        **_tqdm_only: Any,  # leave, position, ...: nothing to redraw
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.file = file if file is not None else sys.stderr
        self.every = progress_every() if every is None else every
        self.clock = clock
        self.disable = False
        self.n = self.untimed = 0
        self.postfix = ""
        self.started = self.last_step = self.written_at = clock()
        self.excluded = 0.0  # paused time and the time of untimed steps: not part of the pace
        self.closed = False
        self._write(self._count())

    def _count(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.desc}: {self.n}{of} {self.unit}s"

    def _write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()
        self.written_at = self.clock()

    def eta(self, now: float) -> float | None:
        """Seconds left at the pace of the timed steps so far (None: no timed step yet, or no total)."""
        timed = self.n - self.untimed
        if self.total is None or timed <= 0:
            return None
        return (now - self.started - self.excluded) / timed * max(0, self.total - self.n)

    def line(self, now: float) -> str:
        """``desc: n/total units, H:MM:SS elapsed, ETA H:MM:SS (postfix)``."""
        eta = self.eta(now)
        left = "unknown" if eta is None else clock_text(eta)
        text = f"{self._count()}, {clock_text(now - self.started)} elapsed, ETA {left}"
        return text + (f" ({self.postfix})" if self.postfix else "")

    def update(self, n: float = 1, timed: bool = True) -> bool:
        now = self.clock()
        if not timed:
            self.untimed += n
            self.excluded += now - self.last_step
        self.last_step = now
        self.n += n
        if now - self.written_at >= self.every:
            self._write(self.line(now))
            return True
        return False

    @contextmanager
    def paused(self) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.exclude(self.clock() - start)

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` just spent (a model's load) out of the pace."""
        self.excluded += seconds
        self.last_step += seconds

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in {**(ordered_dict or {}), **kwargs}.items())

    def refresh(self) -> None:
        """Nothing to redraw: lines are written as the work advances."""

    def close(self, stopped: bool = False) -> None:
        if not self.closed:
            self.closed = True
            elapsed = clock_text(self.clock() - self.started)
            self._write(f"{self._count()}, {'stopped after' if stopped else 'done in'} {elapsed}")

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update()
        self.close()

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.close(stopped=exc_type is not None)


def progress_bar(
    iterable: Iterable | None = None,
    *,
    file: IO[str] | None = None,
    disable: bool = False,
    every: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> Bar | Lines:
    """A tqdm bar where ``file`` (default: stderr) is a terminal, plain lines (:class:`Lines`) elsewhere; silent
    with ``disable``, inside :func:`quiet` or while ``TQDM_DISABLE`` is set. ``kwargs``: tqdm's (total, desc,
    unit, leave, ...)."""
    stream = file if file is not None else sys.stderr
    if disable or silenced():
        return Bar(iterable, file=stream, disable=True, **kwargs)
    if draws_bars(stream):
        return Bar(iterable, file=stream, **kwargs)
    return Lines(iterable, file=stream, every=every, clock=clock, **kwargs)
