"""Issue 65 item 1: the resume key covers the user's code a unit runs -- the modules a plugin imports (the model's
forward, a method's helper), not only the plugin file -- so an edit recomputes instead of reusing stale scores."""

import subprocess
import sys
import types

import pandas as pd
import pytest
import torch

from faithbench.bench.run.user_code import is_user_file, user_sources

NET = """
import torch


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))
"""

PLUGIN = """
import torch

import faithbench
from tiny_net import TinyNet

torch.manual_seed(0)
faithbench.wrap_model(TinyNet(), name="tiny_user_net", input_size=(28, 28), channels=1)
"""

SUITE = """
name = "tiny"
plugins = ["tiny_plugin"]
models = ["tiny_user_net"]
methods = ["gradient"]
controls = false
metrics = ["entropy"]
n_samples = 4
batch_size = 4
"""


def test_an_edit_to_a_module_the_plugin_imports_recomputes_the_unit(tmp_path):
    """The issue's trial: the model's forward changed in a module the plugin imports, the weights did not; the run
    into the same folder resumed all units and kept the old scores."""
    (tmp_path / "tiny_net.py").write_text(NET)
    (tmp_path / "tiny_plugin.py").write_text(PLUGIN)
    (tmp_path / "tiny.toml").write_text(SUITE)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench", "run", "--suite", str(tmp_path / "tiny.toml"), "--out", str(out)]
    command += ["--no-progress", "--no-report"]

    def run() -> tuple[float, str]:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return pd.read_csv(out / "results.csv").set_index("metric").loc["entropy", "mean"], proc.stderr

    first, _ = run()
    again, err = run()
    assert again == first and "1 of 1 units done" in err  # unchanged code: resumed
    (tmp_path / "tiny_net.py").write_text(NET.replace("self.fc(x.flatten(1))", "self.fc(x.flatten(1) ** 2)"))
    edited, err = run()
    assert "0 of 1 units done" in err, err
    assert edited != pytest.approx(first)


def test_user_sources_follow_imports_and_skip_installed_and_own_code(tmp_path, monkeypatch):
    (tmp_path / "deep_helper.py").write_text("SCALE = 2.0\n")
    (tmp_path / "mid_helper.py").write_text("import deep_helper\n\ndef scale():\n    return deep_helper.SCALE\n")
    (tmp_path / "top_plugin.py").write_text("import torch\nimport faithbench\nfrom mid_helper import scale\n")
    (tmp_path / "unrelated_mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import top_plugin  # noqa: F401
    import unrelated_mod  # noqa: F401  (imported, but nothing of the plugin reaches it)

    names = [p.name for p in user_sources([sys.modules["top_plugin"]])]
    assert names == ["deep_helper.py", "mid_helper.py", "top_plugin.py"]
    assert not is_user_file(torch.__file__) and not is_user_file(types.__file__)  # installed, standard library
    import faithbench.metrics.registry as own

    assert not is_user_file(own.__file__) and user_sources([own]) == []


def test_a_wrapped_model_reaches_the_modules_of_its_layers(tmp_path, monkeypatch):
    """A model registered from a notebook (no plugin): its layers' classes are the code that runs."""
    (tmp_path / "layer_defs.py").write_text(NET.replace("TinyNet", "Layered"))
    monkeypatch.syspath_prepend(str(tmp_path))
    from layer_defs import Layered

    import faithbench
    from faithbench.models.registry import MODELS

    faithbench.wrap_model(Layered(), name="layered_user_net", input_size=(28, 28), channels=1)
    try:
        assert [p.name for p in user_sources([MODELS.get("layered_user_net").build])] == ["layer_defs.py"]
    finally:
        MODELS.unregister("layered_user_net")
