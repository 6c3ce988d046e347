"""The report a reader opens: one self-contained HTML page, rendered by a real browser (headless Chromium; the CI
installs Debian's package and sets FAITHBENCH_REQUIRE_BROWSER=1 so the test cannot skip there), the leaderboard's
row order, the terminal's headline and text tables that fit a terminal."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from faithbench.bench.cli import main
from faithbench.bench.report.build import report
from faithbench.bench.report.formats import to_text
from faithbench.bench.report.tables import headline, leaderboard, row_order

SUITE = """
name = "page"
description = "report page test"
dataset = "mnist"
models = ["cnn_mnist"]
methods = ["gradient", "input_x_gradient", "gradcam"]
controls = ["random", "uniform"]
metrics = ["gridpg", "pixel_deletion", "entropy"]
seed = 0
n_samples = 6
batch_size = 8

[gridpg]
preset = "bcos-v2"
n_grids = 2

[deletion]
block_size = 4
"""
SECTIONS = ("headline", "leaderboard", "figures", "settings")


@pytest.fixture(scope="module")
def page_run(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("page")
    (root / "page.toml").write_text(SUITE)
    out = root / "run"
    assert main(["run", "--suite", str(root / "page.toml"), "--out", str(out), "--no-progress", "--no-report"]) == 0
    text, files, _ = report(out / "results.csv", n_boot=200)
    return files["html"], text


def test_the_page_is_one_self_contained_document(page_run):
    path, _ = page_run
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and '<meta charset="utf-8">' in page
    assert "<title>faithbench report: page</title>" in page
    for anchor in SECTIONS:
        assert f'id="{anchor}"' in page, anchor
    assert not re.search(r'(src|href)="(?!data:|#)', page)  # nothing to fetch: figures inline, links in-page
    figures = re.findall(r'src="data:image/png;base64,', page)
    assert len(figures) == len(list(path.parent.glob("*.png"))) >= 3
    # the model's methods best first by GridPG, then the controls (grey rows), once each
    table = page[page.index('id="model-cnn_mnist"') :].split("</table>")[0]
    rows = re.findall(r'<tr(?: class="([^"]*)")?><td class="key">([a-z_]+)</td>', table)
    assert [m for _, m in rows][-2:] == ["random", "uniform"]
    assert [c for c, m in rows if m in ("random", "uniform")] == ["control first-control", "control"]


def test_the_leaderboard_ranks_methods_best_first_and_controls_last(page_run):
    results = pd.read_csv(page_run[0].parent.parent / "results.csv")
    order = [m for _, m in row_order(results)]
    gridpg = results[results["metric"] == "gridpg"].set_index("method")["mean"]
    methods = order[:3]
    assert list(gridpg[methods]) == sorted(gridpg[methods], reverse=True)  # higher is better
    assert order[3:] == ["random", "uniform"]
    assert list(leaderboard(results)["method"]) == order


def test_row_order_puts_an_undefined_score_last_and_follows_the_direction():
    rows = [
        ("m", "gradient", "pixel_deletion", 0.5, False),
        ("m", "gradcam", "pixel_deletion", 0.2, False),
        ("m", "random", "pixel_deletion", 0.1, False),
        ("m", "lime", "pixel_deletion", float("nan"), False),
        ("m", "input_x_gradient", "pixel_deletion", 0.3, False),
    ]
    frame = pd.DataFrame(rows, columns=["model", "method", "metric", "mean", "higher_is_better"])
    frame["rerun_of"] = None
    # lower is better: gradcam 0.2 < input_x_gradient 0.3 < gradient 0.5, then lime (undefined), then the control
    assert [m for _, m in row_order(frame)] == ["gradcam", "input_x_gradient", "gradient", "lime", "random"]


def test_the_terminal_gets_the_headline_and_where_the_rest_is(page_run):
    path, text = page_run
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["model", "gridpg"] and lines[2].startswith("cnn_mnist ")
    assert str(path) in text and str(path.parent / "leaderboard.txt") in text
    assert "random" not in text and "uniform" not in text  # controls never head a column
    results = pd.read_csv(path.parent.parent / "results.csv")
    best = headline(results)
    assert best.iloc[0, 1].split()[0] == results[results.metric == "gridpg"].sort_values("mean").iloc[-1]["method"]


def test_text_tables_wrap_into_blocks_that_repeat_the_key_columns():
    table = pd.DataFrame(
        {"model": ["a", "b"], "method": ["x", "y"], **{f"metric_{i}": ["12.34 ± 0.56"] * 2 for i in range(8)}}
    )
    text = to_text(table, width=60, keys=2)
    blocks = text.split("\n\n")
    assert len(blocks) > 1 and all(b.startswith("model  method") for b in blocks)
    assert max(len(line) for line in text.splitlines()) <= 60
    assert sorted(re.findall(r"metric_\d", text)) == [f"metric_{i}" for i in range(8)]  # every column once
    assert "\n\n" not in to_text(table)  # no width: one block


# ----------------------------------------------------------------------------- in a real browser

BROWSER_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
    "--disable-component-update --disable-sync --hide-scrollbars --enable-logging=stderr --v=0"
).split()


def _browser() -> str:
    found = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    if found is None:
        if os.environ.get("FAITHBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail("FAITHBENCH_REQUIRE_BROWSER=1 but no chromium on PATH (.ci/run installs Debian's chromium)")
        pytest.skip("no headless Chromium on this machine (Debian: apt-get install chromium)")
    return found


def _render(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [_browser(), *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_the_page_renders_in_headless_chromium_without_console_errors(page_run, tmp_path):
    path, _ = page_run
    dom = _render(path, tmp_path, "--dump-dom", "--virtual-time-budget=5000")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == []
    for anchor in SECTIONS:
        assert f'id="{anchor}"' in dom.stdout, anchor
    shot = tmp_path / "page.png"
    run = _render(path, tmp_path, "--window-size=1600,1200", f"--screenshot={shot}")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"))
    assert pixels.shape == (1200, 1600)
    assert (pixels < 200).mean() > 0.01 and len(np.unique(pixels)) > 20  # text and tables drawn, not blank


def test_the_browser_check_catches_a_figure_that_does_not_decode(page_run, tmp_path):
    path, _ = page_run
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r"base64,[A-Za-z0-9+/=]+", "base64,AAAA", path.read_text(encoding="utf-8"), count=1))
    dom = _render(broken, tmp_path, "--dump-dom", "--virtual-time-budget=5000")
    assert any("figure not shown" in line for line in _console(dom.stderr))
