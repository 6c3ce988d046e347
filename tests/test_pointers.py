"""Every pointer in the product's code and docs holds: a repository path it names exists, a markdown link reaches
its file, a ``faithbench.`` name in backquotes imports, and nothing points outside the repository (a user has
only what is installed and the docs)."""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The tests name the installed layout (faithbench/...) and files they make; results/ holds data, not pointers.
SOURCES = [
    f
    for f in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    if f.endswith((".py", ".md", ".toml")) and not f.startswith(("results/", "tests/"))
]
REPO_PATH = re.compile(r"(?<![\w./-])((?:bench|metrics|attributions|models|docs|tests|results|\.ci)/[\w./-]*\w)")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
NAME = re.compile(r"`~?(faithbench(?:\.\w+)+)(?:\(\))?`")
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]+(\.|/|$)")  # bench/suites/NAME.toml, results/claims/SUITE


def _exists(path: str, source: str) -> bool:
    return (ROOT / path).exists() or (ROOT / source).parent.joinpath(path).exists()


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_sources_found():
    assert len(SOURCES) > 150 and "README.md" in SOURCES


@pytest.mark.parametrize("source", SOURCES)
def test_pointers_hold(source: str):
    text = (ROOT / source).read_text(encoding="utf-8")
    assert "../shared" not in text, f"{source} points outside the repository (../shared)"
    paths = {m.group(1).rstrip(".") for m in REPO_PATH.finditer(text)}
    if source.endswith(".md"):
        paths |= {
            m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1) and not m.group(1).startswith("mailto:")
        }
    missing = sorted(p for p in paths if not PLACEHOLDER.search(p) and not _exists(p, source))
    assert not missing, f"{source} names paths that do not exist: {missing}"
    unresolved = sorted({m.group(1) for m in NAME.finditer(text) if not _resolves(m.group(1))})
    assert not unresolved, f"{source} names objects that do not import: {unresolved}"


def test_a_broken_pointer_is_caught(tmp_path: Path):
    assert not _exists("bench/run/no_such_module.py", "README.md")
    assert not _resolves("faithbench.bench.run.no_such_module")
    assert not _resolves("faithbench.metrics.registry.NO_SUCH_NAME")
    assert _resolves("faithbench.metrics.registry.METRICS") and _exists("docs/index.md", "README.md")


# A citation in the code: "Adebayo et al. 2018", "Rong et al., ICML 2022", "Abnar & Zuidema 2020", "(Kendall 1938)".
CITATION = re.compile(
    r"([A-Z][\w'-]+)(?: et al\.,?| & [A-Z][\w'-]+,?)? (?:[A-Z][A-Za-z]+ )?((?:19|20)\d\d)\b(?=[),;.:\s\"])"
)


def _citations(text: str) -> set[tuple[str, str]]:
    found = set()
    for m in CITATION.finditer(text):
        whole = m.group(0)
        bare = text[m.start() - 1 : m.start()] == "(" and text[m.end() : m.end() + 1] in ");" and whole[1].islower()
        if " et al." in whole or " & " in whole or bare:  # a bare "(Name 1938)", not "(TMLR 2024)" or "(NeurIPS 2024,"
            found.add((m.group(1), m.group(2)))
    return found


def test_code_citations_have_a_bibliography_row():
    keys = {
        (m.group(1), m.group(2))
        for row in (ROOT / "docs/bibliography.md").read_text(encoding="utf-8").splitlines()
        if row.startswith("| ")
        for m in CITATION.finditer(row.split("|")[1] + " ")
    }
    code = [f for f in SOURCES if f.endswith(".py")]
    missing = {
        (source, f"{name} {year}")
        for source in code
        for name, year in _citations((ROOT / source).read_text(encoding="utf-8"))
        if (name, year) not in keys
    }
    assert len(keys) > 30 and ("Adebayo", "2018") in keys
    assert _citations(
        '"(Rong et al., ICML 2022)" and (Kendall 1938). See 2024, (TMLR 2024) and (NeurIPS 2024, code).'
    ) == {
        ("Rong", "2022"),
        ("Kendall", "1938"),
    }
    assert not missing, f"citations without a row in docs/bibliography.md: {sorted(missing)}"
