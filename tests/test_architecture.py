"""The layers point one way: faithbench <- models <- attributions <- metrics <- bench, all under one root."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOWER = ("faithbench", "models", "attributions", "metrics")
OLD_ROOTS = {"bench", "metrics", "models", "attributions"}


def _imported_modules(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports (``import a.b`` and ``from a.b import c``: ``a.b``)."""
    modules = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.append(node.module)
    return modules


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports: a faithbench module by its layer (``faithbench.metrics.grids`` ->
    ``metrics``; the foundation's own modules -> ``faithbench``), any other by its top-level name."""
    names = set()
    for module in _imported_modules(path):
        parts = module.split(".")
        layered = parts[0] == "faithbench" and len(parts) > 1 and parts[1] in OLD_ROOTS
        names.add(parts[1] if layered else parts[0])
    return names


def _sources(*pkgs: str) -> list[Path]:
    """The modules of ``pkgs``, without the ``__main__`` entry points (they only dispatch to the CLI)."""
    return [p for pkg in pkgs for p in (ROOT / pkg).rglob("*.py") if p.name != "__main__.py"]


def test_every_project_import_goes_through_the_faithbench_root():
    """`import metrics` would find a user's package of that name: the product imports faithbench.metrics."""
    offenders = {}
    for p in _sources(*LOWER, "bench", "tests"):
        if bad := [n for n in _imported_modules(p) if n.split(".")[0] in OLD_ROOTS]:
            offenders[str(p.relative_to(ROOT))] = bad
    assert not offenders


def test_lower_layers_never_import_bench():
    offenders = [str(p.relative_to(ROOT)) for p in _sources(*LOWER) if "bench" in _imports(p)]
    assert not offenders
    assert not [str(p) for p in _sources("faithbench") if _imports(p) & {"models", "metrics", "attributions"}]


def test_the_lower_layers_import_without_bench():
    code = (
        "import sys, faithbench.metrics, faithbench.models, faithbench.attributions\n"
        "assert 'faithbench.bench' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_no_metric_is_named_in_bench():
    from faithbench.metrics.registry import METRICS

    # The perf harness times named metric functions against Quantus (a benchmark of the functions, not of the
    # registry-driven suite), so it is the one part of bench/ that names them.
    harness = {"perf.py", "perf_quantus.py", "perf_timing.py"}
    for path in (ROOT / "bench").rglob("*.py"):
        if path.parent == ROOT / "bench" and path.name in harness:
            continue
        text = path.read_text().lower()
        named = [m for m in METRICS if m in text]
        assert not named, f"{path.relative_to(ROOT)} names metric(s) {named}"


def test_modules_stay_short():
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in (*LOWER, "bench")
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 320
    }
    assert not long, long


def test_rerun_names_are_made_in_one_place_and_never_parsed():
    """A rerun is data (``Job.rerun_of`` / ``rerun_seed``; the result columns): its name ``METHOD@seedN`` is made by
    the run plan (``bench/plan.py``) and read only for files written before those columns (``bench/results.py``)."""
    found = set()
    for p in _sources(*LOWER, "bench"):
        tree = ast.parse(p.read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body
            if isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if "@" in node.value and not node.value.startswith("cuda"):
                    found.add(str(p.relative_to(ROOT)))
    assert found == {"bench/plan.py", "bench/results.py"}, found
