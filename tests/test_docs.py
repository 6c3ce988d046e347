"""The README is the landing page (what it is, the two commands, one result, links); the documentation site is
docs/ (mkdocs.yml, built in CI with warnings as errors)."""

import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_the_readme_is_short_and_its_two_commands_are_the_set_up():
    assert len(README.encode()) <= 10 * 1024
    install_and_run, install_and_test = _bash_blocks(README)[:2]
    assert install_and_run == "pip install -e . && python -m bench run --suite vision"
    assert install_and_test == "pip install -e '.[test]' && python -m pytest -q"
    assert install_and_test in (ROOT / ".ci" / "run").read_text()  # CI runs the README's test command
    assert _bash_blocks((ROOT / "docs" / "getting-started.md").read_text())[:2] == [install_and_run, install_and_test]


def test_every_page_is_in_the_navigation_and_every_link_of_the_readme_exists():
    """mkdocs.yml names every page but the metric pages, which docs/hooks.py adds (to the navigation and the metrics
    index) from the folder: a new metric's page is listed nowhere by hand."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    nav = re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)", (ROOT / "mkdocs.yml").read_text(), re.M)
    metric_pages = [path for _, path in hooks.metric_pages()]
    assert not set(nav) & set(metric_pages) and "metrics/index.md" in nav
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav + metric_pages) == pages
    config = hooks.on_config({"nav": [{"Metrics": ["metrics/index.md"]}]})
    assert config["nav"][0]["Metrics"] == ["metrics/index.md", *metric_pages]
    index = hooks.on_page_markdown((ROOT / "docs" / "metrics" / "index.md").read_text())
    assert all(f"]({Path(path).name})" in index for path in metric_pages)
    for target in re.findall(r"\]\(([^)#]+)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


@pytest.mark.skipif(find_spec("mkdocs") is None, reason="the docs extra is not installed (pip install -e '.[docs]')")
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_reference_page_is_the_registries_listing():
    """docs/reference.md is ``python -m bench list --markdown``: regenerate it when a name is added."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "list", "--markdown"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert proc.stdout == (ROOT / "docs" / "reference.md").read_text(), (
        "docs/reference.md is stale: python -m faithbench.bench.cli.make_catalog"
    )
