"""The user's code a unit runs: the modules outside faithbench, the standard library and installed packages that a
plugin, a method's class or a registered model reaches (by import or by reference), so that the resume key hashes
them and an edit to a module a plugin imports recomputes its units instead of reusing stale scores."""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from types import FunctionType, MethodType, ModuleType
from typing import Any

import torch

from faithbench.bench.run.provenance import is_own_file

# Where installed code lives: the standard library and every site-packages (a virtual environment's included).
_INSTALLED = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")}


def is_user_file(path: str | Path) -> bool:
    """Whether ``path`` is a source file of the user's (not faithbench's, not the standard library's or a package
    installed into site-packages; an editable install of the user's own project is the user's)."""
    path = Path(path).resolve()
    if path.suffix != ".py" or not path.is_file() or is_own_file(path):
        return False
    if {"site-packages", "dist-packages"} & set(path.parts):
        return False
    return not any(path.is_relative_to(folder) for folder in _INSTALLED)


def _module_of(value: Any, closures: bool = True) -> Iterable[str]:
    """The names of the modules that define ``value`` (a module, class, function or instance; a torch module: the
    classes of all its sub-modules, whose forward is what runs; a function: also what its closure holds, one level)."""
    if isinstance(value, ModuleType):
        yield value.__name__
        return
    if isinstance(value, torch.nn.Module):
        yield from (type(m).__module__ for m in value.modules())
        return
    if isinstance(value, MethodType):
        value = value.__func__
    if isinstance(value, (type, FunctionType)):
        yield getattr(value, "__module__", "") or ""
        for cell in (getattr(value, "__closure__", None) or ()) if closures else ():  # e.g. a build function's
            try:
                yield from _module_of(cell.cell_contents, closures=False)
            except ValueError:  # an empty cell
                continue
        return
    yield type(value).__module__
    module = getattr(value, "module", None)  # an adapter wrapping the torch module
    if isinstance(module, torch.nn.Module):
        yield from _module_of(module)


def user_sources(roots: Iterable[Any]) -> list[Path]:
    """The files of the user's modules that ``roots`` (modules, classes, functions, torch modules) reach: each
    root's own module, and from every user module, the modules its globals are or come from, transitively."""
    seen: set[str] = set()
    files: set[Path] = set()
    todo = [name for root in roots for name in _module_of(root)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not file or not is_user_file(file):
            continue
        files.add(Path(file).resolve())
        for value in list(vars(module).values()):
            todo += [n for n in _module_of(value) if n not in seen]
    return sorted(files)
