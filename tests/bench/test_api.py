"""Python on a par with the command line: benchmark() writes the report on request, gives the statistics marks and
the per-sample table, names what it skipped and removes its own temporary folder; a notebook cell run again
replaces its registration; settings tables by a metric's name; the device's torch flags do not outlive a run."""

from __future__ import annotations

import pytest
import torch

import faithbench
from faithbench.attributions import METHODS, AttributionMethod, register_method
from faithbench.bench.cli import api
from faithbench.bench.run.runner import torch_settings_kept
from faithbench.bench.run.suite import build_suite
from faithbench.errors import UserError
from faithbench.models import MODELS


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 10)

    def forward(self, x):
        return self.head(self.conv(x).mean(dim=(2, 3)))


def test_benchmark_reports_marks_samples_and_skips_and_cleans_its_folder():
    faithbench.wrap_model(_Tiny(), name="tiny", input_size=(28, 28), channels=1)
    with pytest.warns(UserWarning, match=r"1 \(model, method\) pair\(s\) could not run: gradcam on tiny: .*conv_layer"):
        results = faithbench.benchmark(["tiny", "cnn_mnist"], ["gradient", "gradcam"], ["entropy"], n_samples=4,
                                       report=True)  # fmt: skip
    folder = api._TEMPORARY[-1]
    assert results.attrs["run_dir"] == str(folder) and (folder / "report" / "index.html").exists()
    assert results.attrs["skipped"] == [{"model": "tiny", "method": "gradcam", "reason": results.attrs["skipped"][0]
                                         ["reason"]}]  # fmt: skip
    table = faithbench.leaderboard(results, faithbench.statistics(results))
    assert table.to_string().count("★") >= 2  # the best of each model
    per_sample = faithbench.samples(results)
    assert len(per_sample) == 3 * 4 and set(per_sample["method"]) == {"gradient", "gradcam"}
    api._remove_temporary()  # what the process does when it ends
    assert not folder.exists()
    with pytest.raises(UserError, match="no run folder"):
        faithbench.statistics(results)
    MODELS.unregister("tiny")


def test_a_cell_run_again_replaces_its_registration_and_a_clash_is_refused():
    cell = (
        "class Dup(AttributionMethod):\n    name = 'dup'\n    description = 'the input'\n    defaults = {}\n"
        "    def _attribute(self, model, inputs, targets):\n        return inputs\n"
        "register_method(Dup)\n"
    )
    scope = {"AttributionMethod": AttributionMethod, "register_method": register_method, "__name__": "__main__"}
    exec(cell, scope)
    first = METHODS.get("dup")
    exec(cell, scope)
    assert METHODS.get("dup") is not first and METHODS.get("dup").__module__ == "__main__"
    with pytest.raises(ValueError, match="method 'gradient' is already registered"):
        exec(cell.replace("'dup'", "'gradient'"), scope)
    METHODS.unregister("dup")


def test_a_settings_table_by_a_metrics_name():
    base = {"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["pixel_insertion"]}
    assert build_suite(base | {"pixel_insertion": {"block_size": 4}}).configs["deletion"].block_size == 4
    with pytest.raises(UserError, match=r"pixel_insertion and \[deletion\] \(the same table\) set block_size"):
        build_suite(base | {"pixel_insertion": {"block_size": 4}, "deletion": {"block_size": 7}})


def test_the_devices_torch_flags_last_as_long_as_the_run():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with torch_settings_kept():
        torch.backends.cuda.matmul.allow_tf32 = not before[0]
        torch.backends.cudnn.allow_tf32 = not before[1]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
