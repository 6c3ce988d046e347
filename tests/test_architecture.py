"""The layers point one way: faithbench <- models <- attributions <- metrics <- bench, all under one root."""

import ast
import re
import shutil
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

    # The perf room times named metric functions against Quantus (a benchmark of the functions, not of the
    # registry-driven suite), so it is the one part of bench/ that names them.
    for path in (ROOT / "bench").rglob("*.py"):
        if path.parent == ROOT / "bench" / "perf":
            continue
        text = path.read_text().lower()
        named = [m for m in METRICS if re.search(rf"(?<![a-z0-9_]){re.escape(m)}(?![a-z0-9_])", text)]  # a word
        assert not named, f"{path.relative_to(ROOT)} names metric(s) {named}"


def test_modules_stay_short():
    long = {
        str(p.relative_to(ROOT)): n
        for pkg in (*LOWER, "bench")
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, long


# Names more than one module may carry: Python's package files and entry points, and the registry grammar (the
# Registry type at the root, one registry of each layer: metrics/, models/, attributions/).
SHARED_NAMES = {"__init__.py", "__main__.py", "registry.py"}


def test_no_two_modules_share_a_name():
    """A module's file name says what it holds, once: ``report/tables.py`` beside ``run/tables.py`` made a reader
    open both."""
    by_name: dict[str, list[str]] = {}
    for p in _sources(*LOWER, "bench"):
        by_name.setdefault(p.name, []).append(str(p.relative_to(ROOT)))
    repeated = {name: paths for name, paths in by_name.items() if len(paths) > 1 and name not in SHARED_NAMES}
    assert not repeated, repeated
    registries = sorted(str(p.relative_to(ROOT)) for p in _sources(*LOWER) if p.name == "registry.py")
    assert registries == [f"{layer}/registry.py" for layer in ("attributions", "faithbench", "metrics", "models")]


def test_rerun_names_are_made_in_one_place_and_never_parsed():
    """A rerun is data (``Job.rerun_of`` / ``rerun_seed``; the result columns): its name ``METHOD@seedN`` is made by
    the run plan (``bench/run/plan.py``) and read only for files written before those columns
    (``bench/store/tidy.py``, which builds the result rows). A zoo model's build ``NAME@K`` is made and read in one
    module of its own (``faithbench/build_names.py``)."""
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
    assert found == {"bench/run/plan.py", "bench/store/tidy.py", "faithbench/build_names.py"}, found


# bench/'s rooms, lowest first: a room may import the rooms before it, never one after it.
ROOMS = ("store", "run", "estimate", "report", "perf", "cli")
PACKAGES = {"faithbench": ROOT / "faithbench", **{f"faithbench.{p}": ROOT / p for p in OLD_ROOTS}}


def _module_name(path: Path) -> str:
    for package, folder in PACKAGES.items():
        if path.is_relative_to(folder) and not (
            package == "faithbench" and path.is_relative_to(folder / "_bench_entry")
        ):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(path)


def _top_level_imports(path: Path) -> set[str]:
    """The faithbench modules ``path`` imports outside its functions (those under ``TYPE_CHECKING`` included: a
    cycle only the type checker follows is still one): ``from a.b import c`` is ``a.b.c`` when that is a module,
    else ``a.b``."""
    body = ast.parse(path.read_text()).body
    found = set()
    for node in body:
        for stmt in ast.walk(node):
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(stmt, ast.Import):
                found |= {a.name for a in stmt.names if a.name.startswith("faithbench")}
            elif isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("faithbench"):
                for a in stmt.names:
                    child = f"{stmt.module}.{a.name}"
                    found.add(child if child in _MODULES else stmt.module)
    return found


_MODULES = {  # every module of faithbench by its import name (the ``bench`` entry module only dispatches)
    _module_name(p): p for p in _sources(*LOWER, "bench") if "_bench_entry" not in p.parts
}


def test_bench_is_six_rooms_and_none_imports_a_room_above_it():
    """bench/: the store (the run folder's format), the run (plan, execute), the estimate (describes the run, which
    never consults it), the report (reads result files), perf, the command line."""
    loose = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], loose
    assert sorted(p.name for p in (ROOT / "bench").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        [*ROOMS, "suites"]
    )
    offenders = []
    for name, path in _MODULES.items():
        if not name.startswith("faithbench.bench."):
            continue
        room = ROOMS.index(name.split(".")[2])
        for target in _top_level_imports(path):
            if target.startswith("faithbench.bench.") and ROOMS.index(target.split(".")[2]) > room:
                offenders.append(f"{name} imports {target}")
    assert not offenders, offenders


def test_the_report_reads_the_run_folder_through_the_store_only():
    """The report describes a run as its files record it: it imports the store, never the run room."""
    offenders = [
        f"{name} imports {target}"
        for name, path in _MODULES.items()
        if name.startswith("faithbench.bench.report")
        for target in _top_level_imports(path)
        if target.startswith("faithbench.bench.run")
    ]
    assert not offenders, offenders
    assert any(t.startswith("faithbench.bench.store") for t in _top_level_imports(ROOT / "bench/report/build.py"))


def test_a_report_loads_no_registry(tmp_path):
    """A report describes the run as its files record it (run.json's catalog: the registries' names and orders), so
    it imports no models, attributions or metrics module: ``bench report`` of a committed run, in a fresh process."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "results" / "reference" / "smoke", run, ignore=shutil.ignore_patterns("zoo", "truth"))
    script = (
        "import contextlib, io, sys\n"
        "from faithbench.bench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['report', sys.argv[1] + '/results.csv', '--n-boot', '100']) == 0\n"
        "layers = ('faithbench.models', 'faithbench.attributions', 'faithbench.metrics', 'faithbench.bench.run')\n"
        "print(sorted(m for m in sys.modules if m.startswith(layers)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(run)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout[-2000:]
    assert (run / "report" / "index.html").exists()


def test_the_report_room_loads_no_model_and_runs_no_method():
    """The report reads result files only: the example maps are the run's (``bench/store/examples.py``)."""
    for name, path in _MODULES.items():
        if name.startswith("faithbench.bench.report"):
            text = path.read_text()
            assert "load_model" not in text and "get_method" not in text and ".attribute(" not in text, name


def test_no_project_import_inside_a_function():
    """Every module states what it depends on at its top; the command line's dispatch table
    (``faithbench.bench.cli.COMMANDS``) is the one lazy place, and it holds module names, not import statements."""
    offenders = []
    for name, path in _MODULES.items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("faithbench"):
                        offenders.append(f"{name}.{fn.name}: from {node.module}")
                    elif isinstance(node, ast.Import) and any(a.name.startswith("faithbench") for a in node.names):
                        offenders.append(f"{name}.{fn.name}: import")
    assert not offenders, offenders


def test_no_import_cycle():
    """No module imports, through any chain, a module that imports it back (a package's own ``__init__`` excluded:
    Python runs it before any of its modules)."""
    graph = {}
    for name, path in _MODULES.items():
        graph[name] = {t for t in _top_level_imports(path) if t in _MODULES and not name.startswith(f"{t}.")}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles
