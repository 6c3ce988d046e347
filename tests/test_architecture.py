"""The layers point one way: faithbench <- models <- attributions <- metrics <- bench."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOWER = ("faithbench", "models", "attributions", "metrics")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_lower_layers_never_import_bench():
    offenders = [
        str(p.relative_to(ROOT)) for pkg in LOWER for p in (ROOT / pkg).rglob("*.py") if "bench" in _imports(p)
    ]
    assert not offenders
    assert not [str(p) for p in (ROOT / "faithbench").rglob("*.py") if _imports(p) & {"models", "metrics"}]


def test_the_lower_layers_import_without_bench():
    code = "import metrics, models, attributions, sys; assert 'bench' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_no_metric_is_named_in_bench():
    from metrics.registry import METRICS

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
