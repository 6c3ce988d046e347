"""Start-up check: a folder in the working directory must not shadow faithbench's packages.

``python -m bench`` puts the current directory first on the import path, so a user's own
``models/``, ``metrics/``, ``attributions/`` or ``bench/`` folder would be imported instead of
faithbench's and fail later with a confusing ImportError. This check runs before those imports.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGES = ("faithbench", "bench", "metrics", "models", "attributions")
ROOT = Path(__file__).resolve().parent.parent  # the folder that holds faithbench's packages


def _location(name: str) -> Path | None:
    """The folder ``import name`` would load, without importing it (None: not importable)."""
    module = sys.modules.get(name)
    if module is not None:
        spec = module.__spec__
    else:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        return Path(spec.origin).resolve().parent
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]).resolve() if locations else None


def shadowing_problem() -> str | None:
    """One line naming the folder that shadows a faithbench package and the fix, or None."""
    for name in PACKAGES:
        found = _location(name)
        expected = ROOT / name
        if found is not None and found != expected:
            return (
                f"the folder {found} shadows faithbench's '{name}' package (python -m puts the current "
                f"directory first on the import path; faithbench's is {expected}). Run from another directory, "
                "or use the `faithbench` command, which works from any directory"
            )
    return None
