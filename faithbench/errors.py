"""Errors that mean "the user asked for something wrong", as opposed to a bug.

The command line shows a :class:`UserError` as one line (``error: ...``, exit 2) and lets every other
exception show its traceback, so a failure deep in torch never looks like a typo.
"""

from __future__ import annotations

from collections.abc import Sequence


class UserError(ValueError):
    """A mistake in what the user asked for: a name, a file, an option, a suite value.

    The message names the problem and the valid choices or the fix.
    """


class UnknownNameError(UserError, KeyError):
    """A name that is not registered (model, method, metric, preset, suite, ...)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def check_choice(value: str, name: str, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``; otherwise a ValueError that lists them."""
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(map(repr, choices))}")
    return value


class ParameterError(UserError, TypeError):
    """An unknown or ill-typed parameter of a method or a config table."""
