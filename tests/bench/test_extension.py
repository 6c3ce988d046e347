"""Extending faithbench from outside the package: a toy metric and a toy method, one file, one suite."""

import subprocess
import sys

import pandas as pd

PLUGIN = '''
"""A user's plugin: one metric and one method, each one class or spec plus one registration."""
from dataclasses import dataclass

import torch

from faithbench.attributions import AttributionMethod, register_method
from faithbench.metrics import MetricResult, MetricSpec, register_metric


@register_method
class CentrePrior(AttributionMethod):
    name = "centre_prior"
    description = "a Gaussian bump in the image centre, whatever the model (a control explainer)"
    defaults = {"width": 0.25}

    def _attribute(self, model, inputs, targets):
        h, w = inputs.shape[-2:]
        ys = (torch.arange(h, device=inputs.device) - (h - 1) / 2) / h
        xs = (torch.arange(w, device=inputs.device) - (w - 1) / 2) / w
        bump = torch.exp(-(ys[:, None] ** 2 + xs[None, :] ** 2) / (2 * self.params["width"] ** 2))
        return bump.expand(inputs.shape[0], h, w)


@dataclass(frozen=True)
class TopShareConfig:
    fraction: float = 0.1


def top_share(unit, cfg):
    """Share of |a| in the top ``fraction`` of pixels."""
    _, _, ids = unit.samples()
    a = unit.sample_maps().abs().flatten(1)
    k = max(1, int(cfg.fraction * a.shape[1]))
    values = a.topk(k, dim=1).values.sum(1) / a.sum(1)
    undefined, params = torch.zeros_like(values, dtype=torch.bool), {"fraction": cfg.fraction}
    return MetricResult(values=values, undefined=undefined, sample_ids=ids, params=params, explained="samples")


register_metric(
    MetricSpec(name="top_share", description="share of |a| in the top pixels", higher_is_better=True,
               modalities=("image",), scale=100, unit="%", evaluate=top_share, config=TopShareConfig,
               table="top_share")
)
'''

SUITE = """
name = "extended"
plugins = ["toy_plugin"]
models = ["cnn_mnist"]
methods = ["centre_prior", "gradient"]
controls = false
metrics = ["top_share", "gini"]
n_samples = 4
batch_size = 4

[top_share]
fraction = 0.05

[method_params.centre_prior]
width = 0.1
"""


def test_a_toy_metric_and_method_from_outside_run_through_bench_run(tmp_path):
    (tmp_path / "toy_plugin.py").write_text(PLUGIN)
    (tmp_path / "extended.toml").write_text(SUITE)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--suite", str(tmp_path / "extended.toml"), "--out", str(out)]
        + ["--no-progress", "--no-report"],
        capture_output=True,
        text=True,
        cwd=tmp_path.parent,  # not the plugin's folder: the suite file's folder is searched
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = pd.read_csv(out / "results.csv").set_index(["method", "metric"])
    assert set(results.index) == {(m, k) for m in ("centre_prior", "gradient") for k in ("top_share", "gini")}
    assert results.loc[("centre_prior", "top_share"), "n"] == 4
    # The centre prior puts far more than 5 % of its mass in 5 % of the pixels; gini agrees it is sparse-ish.
    assert 5 < results.loc[("centre_prior", "top_share"), "mean"] <= 100
    assert '"fraction": 0.05' in results.loc[("centre_prior", "top_share"), "params"]
    assert '"width": 0.1' in results.loc[("centre_prior", "gini"), "params"]


def test_a_plugin_table_is_validated_like_a_built_in_one(tmp_path):
    (tmp_path / "toy_plugin.py").write_text(PLUGIN)
    (tmp_path / "extended.toml").write_text(SUITE.replace("fraction = 0.05", "fractoin = 0.05"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            "--suite",
            str(tmp_path / "extended.toml"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "[top_share] has unknown key(s) fractoin; valid keys: fraction" in proc.stderr
