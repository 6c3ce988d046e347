"""Where suites come from: the shipped suite files (``bench/suites/*.toml``, by name), files by path, and a suite's
tiers (suites run after it into sub-folders of its run)."""

from __future__ import annotations

import importlib
import os
import sys
import tomllib
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path

from faithbench.errors import UserError
from faithbench.registry import Registry

SUITES: Registry[Path] = Registry("suite")
for _path in sorted(Path(str(files("faithbench.bench").joinpath("suites"))).glob("*.toml")):
    SUITES.register(_path.stem, _path)


def available_suites() -> list[str]:
    return SUITES.names()


def suite_description(name: str) -> str:
    """A shipped suite's description, read without validating it (``list`` shows suites that need data)."""
    return str(tomllib.loads(SUITES.get(name).read_text()).get("description", ""))


def suite_path(name_or_path: str, what: str = "suite file") -> Path:
    """The file of a suite named ``name_or_path`` (``bench/suites/NAME.toml``) or at that path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.is_file():  # a folder named like a suite (its run) is not a suite file
        if not path.is_file():
            raise UserError(f"{what} {path} does not exist")
        return path
    if name_or_path in SUITES:
        return SUITES.get(name_or_path)
    raise SUITES.unknown(name_or_path, "or a path to a .toml file")


def tiers(value: object, name: object, where: str, folder: Path | None) -> tuple[str, ...]:
    """Suites run after this one into sub-folders (:func:`~faithbench.bench.store.results.tier_folder`): registered
    names, or paths to .toml files (relative to the suite file's folder); a tier has no tiers of its own."""
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where} tiers must be a list of suite names, got {value!r}")
    out = []
    for tier in value:
        relative = tier.endswith(".toml") and folder is not None and not Path(tier).is_absolute()
        path = suite_path(str(folder / tier) if relative else tier, f"{where} tier suite file")
        tier = str(path.resolve()) if tier.endswith(".toml") else tier
        nested = tomllib.loads(path.read_text()).get("tiers")
        if tier == name or nested:
            raise UserError(f"{where} tier {tier!r} has tiers of its own ({', '.join(nested or [tier])}); none allowed")
        out.append(tier)
    return tuple(dict.fromkeys(out))


def import_plugins(plugins: object, where: str, folder: Path | None) -> tuple[str, ...]:
    """Import the suite's plugin modules (they register metrics, methods, models) before validation."""
    if not isinstance(plugins, list | tuple) or not all(isinstance(p, str) for p in plugins):
        raise UserError(f"{where} plugins must be a list of module names, got {plugins!r}")
    if folder is not None and plugins and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # a plugin module next to the suite file
    if plugins and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # and in the working directory, as `python -m` finds it (the console script too)
    for module in plugins:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module.split(".")[0] and exc.name != module:
                raise
            raise UserError(
                f"{where} plugin module {module!r} was not found (looked beside the suite file and on the import path)"
            ) from None
    return tuple(plugins)


def plugin_folders(plugins: Iterable[str]) -> list[str]:
    """The import roots the suite's plugin modules were found in: run.json records them, so that ``status``,
    ``rescore`` and ``report`` of the run import them again from wherever they are started."""
    roots = set()
    for name in plugins:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:  # a module pkg.mod lies its dots below its root; a package's __init__.py one more
            roots.add(str(Path(file).resolve().parents[name.count(".") + (Path(file).name == "__init__.py")]))
    return sorted(roots)
