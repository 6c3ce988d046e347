"""A name -> object registry whose lookups fail with the close matches and the valid names."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from faithbench.errors import UnknownNameError, UserError

T = TypeVar("T")

# An error spells out a registry of up to this many names (a few terminal lines: methods, metrics, suites); a longer
# one (the models: about 90) gets its close matches and a pointer to `list` instead of a screenful of names.
LISTED_IN_FULL = 32


class Registry(Generic[T]):
    """Named entries of one kind (metrics, models, methods, presets, suites, ...)."""

    def __init__(self, kind: str, plural: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self._entries: dict[str, T] = {}
        # names derived from registered ones on first use (a zoo model's further builds, ``NAME@2``): found by get and
        # ``in``, never listed (names, items, len and iteration are the registered entries only)
        self.derive: Callable[[str], T | None] | None = None
        self._derived: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` as ``name``. The same definition run again (a notebook cell re-run: a class or function of
        the same module and name, outside faithbench) replaces the old one; any other clash is an error."""
        if name in self._entries and not _redefinition(self._entries[name], entry):
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            entry = self._derive(name)
            if entry is None:
                raise self.unknown(name) from None
            return entry

    def _derive(self, name: object) -> T | None:
        if not isinstance(name, str) or self.derive is None:
            return None
        if name not in self._derived:
            entry = self.derive(name)
            if entry is None:
                return None
            self._derived[name] = entry
        return self._derived[name]

    def unregister(self, name: str) -> T:
        """Remove an entry (tests, and plugins that replace an entry on purpose); the names derived so far go too
        (one may have been derived from it)."""
        self._derived.clear()
        return self._entries.pop(name)

    __getitem__ = get

    def require(self, names: object, what: str | None = None) -> tuple[str, ...]:
        """Validate a list of names at once: a list of strings, every one registered."""
        if isinstance(names, str) or not isinstance(names, list | tuple):
            example = next(iter(self._entries), "name")  # the first registered: the zoo's, for models
            raise UserError(f'{what or self.plural} must be a list of names, e.g. ["{example}"], got {names!r}')
        unknown = [n for n in names if n not in self]
        if unknown:
            prefix = f"{what}: " if what else ""
            named = ", ".join(f"{n}{self._did_you_mean(n)}" for n in unknown)
            raise UnknownNameError(f"{prefix}unknown {self.kind}(s) {named}; {self._valid()}")
        return tuple(names)

    def unknown(self, name: object, other: str = "") -> UnknownNameError:
        """The error for an unregistered ``name``: its close matches, then the valid names or where to see them
        (``other``: what else the caller would have accepted, e.g. ``or a path to a .toml file``)."""
        also = f" ({other})" if other else ""
        return UnknownNameError(f"unknown {self.kind} {name!r}{self._did_you_mean(name)}; {self._valid()}{also}")

    def _did_you_mean(self, name: object) -> str:
        """`` (did you mean A, B?)`` for the registered names close to ``name`` (in any case), or ``""``."""
        if not isinstance(name, str):
            return ""
        lowered = {n.lower(): n for n in self._entries}
        close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6)
        return f" (did you mean {', '.join(lowered[c] for c in close)}?)" if close else ""

    def _valid(self) -> str:
        """Every valid name, or for a long registry where to find them (the close matches are named already)."""
        if len(self) > LISTED_IN_FULL:
            return f"`python -m bench list` shows all {len(self)} {self.plural}"
        return f"valid {self.plural}: {', '.join(self.names()) or '(none registered)'}"

    def names(self) -> list[str]:
        """The registered names, sorted (as error messages list them)."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) pairs in registration order."""
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries or self._derive(name) is not None
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        """Names in registration order (the order of leaderboards and listings)."""
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def _origin(entry: object) -> tuple[str, str] | None:
    """(module, qualified name) of a class or function, or of an entry's ``evaluate`` hook (a metric's spec)."""
    if not (isinstance(entry, type) or callable(entry)) or not hasattr(entry, "__qualname__"):
        entry = getattr(entry, "evaluate", None)
    module, name = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return (module, name) if module and name else None


def _redefinition(old: object, new: object) -> bool:
    origin = _origin(old)
    return origin is not None and origin == _origin(new) and not origin[0].startswith("faithbench")
