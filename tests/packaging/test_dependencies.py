"""The install declares what the product imports: a fresh `pip install -e .` must run every method."""

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
OWN = {"faithbench", "bench", "metrics", "models", "attributions"}
# Imported only through a library that declares it (captum's SkLearnRidge imports sklearn lazily).
INDIRECT = {"scikit-learn"}
# Imported inside a guard that degrades gracefully (``bench perf`` skips its Quantus and torch-cam rows with a note; the
# Hugging Face data sets and faithbench.timm_model say which extra to install);
# must be declared in an extra.
OPTIONAL = {"quantus", "torchcam", "datasets", "timm", "submitit"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name.lower().replace("_", "-") for r in project["dependencies"]}


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name.lower() for reqs in project["optional-dependencies"].values() for r in reqs}


def _imported_top_level() -> dict[str, str]:
    """Top-level module -> first file importing it, over every product module (not tests)."""
    found: dict[str, str] = {}
    for pkg in sorted(OWN):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    declared = _declared()
    dists = packages_distributions()
    missing = []
    for module, where in sorted(_imported_top_level().items()):
        if module in OWN or module in sys.stdlib_module_names or module == "__future__":
            continue
        if module in OPTIONAL and module in _extras():
            continue
        names = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        if not names & declared:
            missing.append(f"{module} (distribution {', '.join(sorted(names))}, imported in {where})")
    assert not missing, "imported but not declared in pyproject dependencies: " + "; ".join(missing)


def test_indirect_dependencies_are_declared_too():
    assert INDIRECT <= _declared()


def test_every_python_the_pinned_torch_supports_is_accepted():
    """torch==2.14.1 ships wheels for CPython 3.10-3.14; faithbench needs 3.11 (tomllib)."""
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    accepted = SpecifierSet(project["requires-python"])
    assert [v for v in ("3.10", "3.11", "3.12", "3.13", "3.14") if v in accepted] == ["3.11", "3.12", "3.13", "3.14"]
