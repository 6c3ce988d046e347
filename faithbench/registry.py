"""A name -> object registry whose lookups fail with the list of valid names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from faithbench.errors import UnknownNameError, UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (metrics, models, methods, presets, suites, ...)."""

    def __init__(self, kind: str, plural: str | None = None) -> None:
        self.kind = kind
        self.plural = plural or f"{kind}s"
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid {self.plural}: {self._valid()}") from None

    def unregister(self, name: str) -> T:
        """Remove an entry (tests, and plugins that replace an entry on purpose)."""
        return self._entries.pop(name)

    __getitem__ = get

    def check(self, names: object, what: str | None = None) -> tuple[str, ...]:
        """Validate a list of names at once: a list of strings, every one registered."""
        if isinstance(names, str) or not isinstance(names, list | tuple):
            example = next(iter(self._entries), "name")  # the first registered: the zoo's, for models
            raise UserError(f'{what or self.plural} must be a list of names, e.g. ["{example}"], got {names!r}')
        unknown = [str(n) for n in names if n not in self]
        if unknown:
            prefix = f"{what}: " if what else ""
            raise UnknownNameError(
                f"{prefix}unknown {self.kind}(s) {', '.join(unknown)}; valid {self.plural}: {self._valid()}"
            )
        return tuple(names)

    def _valid(self) -> str:
        return ", ".join(self.names()) or "(none registered)"

    def names(self) -> list[str]:
        """The registered names, sorted (as error messages list them)."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """(name, entry) pairs in registration order."""
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._entries
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        """Names in registration order (the order of leaderboards and listings)."""
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
