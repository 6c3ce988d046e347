"""Provenance: what every result row carries (versions, git revision, device, seed) and the identities of the
code a result was computed by (faithbench's own sources, a plugin's files), which the resume keys hash."""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

import faithbench
from faithbench.attributions import ALL_CONTROLS, CORRUPTION_CONTROLS, METHODS
from faithbench.attributions.identities import KNOWN_IDENTITIES
from faithbench.attributions.truth_controls import TRUTH_CORRUPTIONS
from faithbench.bench.run.cpu_numerics import numerics_in_effect
from faithbench.bench.store.run_catalog import RunCatalog
from faithbench.metrics.registry import METRICS
from faithbench.metrics.truth_agreement import REFERENCE

# The folder of each of faithbench's packages: beside each other in a checkout (bench/, metrics/, ...), nested under
# faithbench/ in an installed wheel. LAYERS are the sub-packages; the root's own modules are faithbench's *.py.
LAYERS = ("bench", "metrics", "models", "attributions")
PACKAGE_DIRS = {
    "faithbench": Path(faithbench.__file__).resolve().parent,
    **{name: Path(importlib.util.find_spec(f"faithbench.{name}").origin).resolve().parent for name in LAYERS},
}
ROOT = PACKAGE_DIRS["faithbench"].parent  # a checkout's root (git revision); site-packages when installed


def is_own_file(path: str | Path) -> bool:
    """Whether ``path`` is one of faithbench's own source files (not a plugin's or a user's)."""
    path = Path(path).resolve()
    return any(path.is_relative_to(folder) for folder in PACKAGE_DIRS.values())


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def git_revision() -> str:
    """The checkout's commit (``-dirty`` with uncommitted changes), or ``unknown`` outside git."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


@lru_cache(maxsize=1)
def code_identity() -> str:
    """SHA-256 of faithbench's own source (every module and suite file): two runs share it only if they
    ran the same code, whether installed from git, a wheel or an edited checkout."""
    h = hashlib.sha256()
    for name, folder in PACKAGE_DIRS.items():
        # The root's own modules only: in a wheel the layers are its sub-folders, hashed under their own names.
        paths = folder.glob("*.py") if name == "faithbench" else folder.rglob("*")
        for path in sorted(paths):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                h.update(f"{name}/{path.relative_to(folder).as_posix()}".encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def source_identity(files: Iterable[Path]) -> str:
    """SHA-256 over the names and bytes of ``files`` (code that is not faithbench's: plugins)."""
    h = hashlib.sha256()
    for path in sorted({Path(f).resolve() for f in files}):
        h.update(path.name.encode())  # the name, not the folder: a moved checkout keeps its keys
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
    return h.hexdigest()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{device.index or 0} {torch.cuda.get_device_name(device)}"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def provenance(device: torch.device, seed: int) -> dict[str, str]:
    """What every result row carries: versions, git revision, device, seed, time."""
    return {
        "faithbench_version": _version("faithbench"),
        "git_revision": git_revision(),
        "faithbench_code_sha256": code_identity()[:16],
        "torch_version": torch.__version__,
        "captum_version": _version("captum"),
        "zennit_version": _version("zennit"),
        "bcos_version": _version("bcos"),
        "lxt_version": _version("lxt"),
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
        "device": device_name(device),
        "host": platform.node(),
        "numerics": numerics_in_effect(),  # portable or not (faithbench numerics): rounding differs across CPUs
        "seed": str(seed),
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def registry_catalog() -> RunCatalog:
    """What run.json records of the registries as they are now, plugins included (its report reads this)."""
    return RunCatalog(
        methods=tuple(name for name in METHODS if name not in ALL_CONTROLS),
        controls=tuple(ALL_CONTROLS),
        corruption_controls=tuple(CORRUPTION_CONTROLS),
        truth_corruptions=tuple(TRUTH_CORRUPTIONS),
        truth_reference=REFERENCE,
        metrics=tuple(METRICS),
        curves={name: {"x": spec.curve_label, "y": spec.curve_value_label} for name, spec in METRICS.items()},
        identities=tuple(f"{' = '.join(k.pair)}: {k.reason}" for k in KNOWN_IDENTITIES),
    )
