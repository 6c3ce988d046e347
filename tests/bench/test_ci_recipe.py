"""docs/ci.md, run as written: its suite and gate script in a fresh project folder make a baseline, pass a rerun,
and fail a planted regression and a collapsed model by name; its two workflows parse and call the script."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def _gate(project: Path, **env: str) -> subprocess.CompletedProcess:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `faithbench` of this environment
    return subprocess.run(
        ["bash", "ci/faithbench-gate.sh"], cwd=project, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PATH": path, **env},
    )  # fmt: skip


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's project with the page's suite and script, and a baseline made by the script itself."""
    (suite,) = _blocks("toml")
    (script,) = _blocks("bash")
    root = tmp_path_factory.mktemp("project")
    (root / "faithbench-ci.toml").write_text(suite)
    (root / "ci").mkdir()
    (root / "ci" / "faithbench-gate.sh").write_text(script)
    made = _gate(root, UPDATE_BASELINE="1")
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    assert sorted(p.name for p in (root / "ci" / "baseline").iterdir()) == ["results.csv", "run.json", "samples.csv"]
    return root


def test_a_rerun_passes_the_committed_baseline(project):
    rerun = _gate(project)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert rerun.stdout.strip().splitlines()[-1].startswith("OK:")
    record = json.loads((project / "runs" / "ci" / "run.json").read_text())
    assert record["provenance"]["numerics"] == "portable"  # set by the script, recorded
    assert record["models"]["bcos_cnn_mnist"]["run_accuracy"]["n"] == 512


def test_a_planted_regression_and_a_collapsed_model_fail_by_name(project, tmp_path):
    baseline = project / "ci" / "baseline"
    kept = {p.name: p.read_bytes() for p in baseline.iterdir()}
    try:
        res = pd.read_csv(baseline / "results.csv")
        hit = (res.method == "native") & (res.metric == "gridpg")
        res.loc[hit, "mean"] += 2.0  # the new run is 2 points worse than this baseline
        res.to_csv(baseline / "results.csv", index=False)
        gated = _gate(project)
        assert gated.returncode == 1, gated.stdout[-3000:]
        assert "REGRESSED" in gated.stdout.splitlines()[-1]
    finally:
        for name, data in kept.items():
            (baseline / name).write_bytes(data)
    # the same run with its model collapsed (its recorded accuracy 0 %): the script's compare names it
    new = tmp_path / "collapsed"
    new.mkdir()
    for name in ("results.csv", "samples.csv"):
        (new / name).write_bytes((project / "runs" / "ci" / name).read_bytes())
    run = json.loads((project / "runs" / "ci" / "run.json").read_text())
    run["models"]["bcos_cnn_mnist"]["run_accuracy"]["correct"] = 0
    (new / "run.json").write_text(json.dumps(run))
    gated = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "ci/baseline/results.csv", str(new / "results.csv"), "--two-sided"],
        cwd=project, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert gated.returncode == 1, gated.stdout[-2000:]
    assert re.search(r"ACCURACY bcos_cnn_mnist: \d+\.\d % -> 0\.0 % \(not above the floor", gated.stdout)


def test_the_workflows_parse_and_run_the_gate_script():
    github, gitlab = (yaml.safe_load(b) for b in _blocks("yaml"))
    steps = github["jobs"]["gate"]["steps"]
    assert any(s.get("run") == "bash ci/faithbench-gate.sh" for s in steps)
    assert "bash ci/faithbench-gate.sh" in gitlab["faithbench"]["script"]
