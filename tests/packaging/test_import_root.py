"""One import root: the distribution installs `faithbench` and the `bench` entry module, nothing else."""

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("bench", "metrics", "models", "attributions")


def test_every_package_folder_is_listed_and_mapped_under_faithbench():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {folder: name for name, folder in setuptools["package-dir"].items()}
    expected = {"faithbench", "bench"}  # the root (and its own folder) and the entry module
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            sub = init.parent.relative_to(ROOT / layer).parts
            expected.add(".".join((mapped[layer], *sub)))
    assert set(setuptools["packages"]) == expected
    assert {name.split(".")[0] for name in setuptools["packages"]} == {"faithbench", "bench"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (the build leaves nothing in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "faithbench", *LAYERS):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(
            ROOT / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return zipfile.ZipFile(next(out.glob("faithbench-*.whl")))


def test_the_wheel_installs_one_root_and_the_entry_module(wheel):
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"faithbench", "bench"}
    assert sorted(n for n in names if n.startswith("bench/")) == ["bench/__init__.py", "bench/__main__.py"]
    for layer in LAYERS:
        assert f"faithbench/{layer}/__init__.py" in names
    assert any(n.startswith("faithbench/bench/suites/") and n.endswith(".toml") for n in names)
    assert "faithbench/bench/cli/catalog.json" in names  # --help and list read it
    assert any(n.startswith("faithbench/models/data/files/") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "faithbench = faithbench.bench.cli:main" in wheel.read(entry).decode()


def _users_project(tmp_path: Path) -> Path:
    """A research project's folder with packages named like faithbench's layers (each would fail if imported)."""
    for name in ("models", "metrics", "attributions"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} package')\n")
    return tmp_path


def test_the_old_top_level_names_are_gone(tmp_path):
    code = (
        "import importlib.util as u, sys\n"
        "assert all(u.find_spec(n) is None for n in ('metrics', 'models', 'attributions'))\n"
        "import faithbench.metrics, faithbench.models, faithbench.attributions\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=300)


@pytest.mark.parametrize("command", ["module", "script"])
def test_runs_beside_a_users_models_and_metrics_packages(tmp_path, command):
    project = _users_project(tmp_path)
    script = Path(sys.executable).with_name("faithbench")
    argv = [sys.executable, "-m", "bench", "list"] if command == "module" else [str(script), "list"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=project, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "metrics:" in proc.stdout and "gridpg" in proc.stdout


def test_a_users_script_imports_its_own_models_beside_faithbench(tmp_path):
    project = _users_project(tmp_path)
    (project / "models" / "__init__.py").write_text("MINE = True\n")
    code = "import models, faithbench\nfrom faithbench.models import load_model\nassert models.MINE\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=project, timeout=300)
