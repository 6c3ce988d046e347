"""The names of a zoo model's builds: ``NAME@K`` is build K of ``NAME`` (K >= 2), ``NAME`` build 1 (what a build
is: :mod:`faithbench.models.zoo.builds`). Names only, importable by the report without a model module."""

from __future__ import annotations

SEPARATOR = "@"


def split_build(name: str) -> tuple[str, int]:
    """``NAME@K`` -> (``NAME``, K); any other name is build 1 of itself. K is a whole number >= 2 (build 1 is
    ``NAME`` itself); None for a malformed suffix is the caller's unknown name."""
    base, sep, k = name.rpartition(SEPARATOR)
    if not sep:
        return name, 1
    if not (k.isdigit() and int(k) >= 2 and str(int(k)) == k and base):
        return name, 0
    return base, int(k)


def build_name(name: str, k: int) -> str:
    """The name of build ``k`` of model ``name`` (build 1: the name itself)."""
    if k < 1:
        raise ValueError(f"builds count from 1, got {k}")
    return name if k == 1 else f"{name}{SEPARATOR}{k}"
