"""The identical-maps tripwire: flagged pairs, kept across a resume, listed and labelled by the report."""

import base64
import contextlib
import json
import math

import pytest
import torch

from faithbench.attributions import METHODS, register_method
from faithbench.attributions.gradients import Gradient
from faithbench.bench.report.build import report
from faithbench.bench.run import fingerprints, runner, work
from faithbench.bench.run.suite import build_suite
from faithbench.bench.store import identity
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import bcos_inverse
from faithbench.models.nets.architectures import bcos_digit_cnn


class GradientCopy(Gradient):
    """The gradient under another name: the silent duplicate the check must catch."""

    name = "gradient_copy"
    description = "test: the gradient again"


class GradientTwice(Gradient):
    """Twice the gradient: different maps (relative difference 0.5), never flagged."""

    name = "gradient_twice"
    description = "test: 2 x the gradient"

    def _attribute(self, model, inputs, targets):
        return 2 * super()._attribute(model, inputs, targets)


SUITE = {
    "name": "identity",
    "dataset": "mnist",
    "models": ["cnn_mnist"],
    "methods": ["gradient", "gradient_copy", "gradient_twice"],
    "metrics": ["gini"],
    "n_samples": 3,
    "batch_size": 3,
}


@contextlib.contextmanager
def toy_methods_registered():
    for cls in (GradientCopy, GradientTwice):
        register_method(cls)
    try:
        yield
    finally:
        for cls in (GradientCopy, GradientTwice):
            METHODS.unregister(cls.name)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("identity") / "run"
    with toy_methods_registered():
        runner.run(build_suite(SUITE), out, device="cpu", progress=False)
    return out


def test_same_maps_are_flagged_and_different_ones_not(run_dir):
    record = json.loads((run_dir / identity.FILE).read_text())
    assert record["rtol"] == 1e-5 and "max |a - b| <= 1e-05" in record["rule"]
    assert [(p["methods"], p["status"]) for p in record["pairs"]] == [(["gradient", "gradient_copy"], "unexpected")]
    assert record["pairs"][0]["model"] == "cnn_mnist" and record["pairs"][0]["images"] == 2
    unit = json.loads((run_dir / "units" / "cnn_mnist__gradient.json").read_text())
    assert unit["fingerprint"]["shape"] == [2, 28 * 28] and len(unit["fingerprint"]["float32"]) < 9000


def test_the_flag_survives_a_resume_from_the_unit_files(run_dir, monkeypatch, capsys):
    (run_dir / identity.FILE).unlink()

    def boom(*args, **kwargs):
        raise AssertionError("a finished unit was recomputed")

    monkeypatch.setattr(work, "evaluate_unit", boom)
    monkeypatch.setattr(work, "fingerprint", boom)
    with toy_methods_registered():
        runner.run(build_suite(SUITE), run_dir, device="cpu", progress=False)
    pairs = json.loads((run_dir / identity.FILE).read_text())["pairs"]
    assert [p["methods"] for p in pairs] == [["gradient", "gradient_copy"]]
    err = capsys.readouterr().err
    assert "warning: on cnn_mnist, methods gradient and gradient_copy give the same maps" in err
    assert err.count("give the same maps") == 1


def test_the_report_lists_flagged_pairs_and_states_the_known_identities(run_dir):
    with toy_methods_registered():
        text, tables, _ = report(run_dir / "results.csv")
    md = tables["markdown"].read_text()
    assert "### Methods with identical maps" in md
    assert "| cnn_mnist | gradient = gradient_copy |" in md and "| unexpected |" in md
    assert "integrated_gradients = input_x_gradient: IntegratedGradients from a zero baseline" in md
    assert "gradient = gradient_copy" in text and "unexpected" in tables["text"].read_text()


# ----------------------------------------------------------------------------- labelling, by hand


def _unit(method: str, maps: torch.Tensor, params: dict) -> dict:
    flat = maps.reshape(len(maps), -1).numpy().astype("<f4")
    fp = {"sample_ids": list(range(len(maps))), "shape": list(flat.shape), "float32": base64.b64encode(flat).decode()}
    return {"model": "bcos", "method": method, "method_params": params, "fingerprint": fp}


def test_a_mathematical_identity_is_labelled_expected_with_its_reason():
    torch.manual_seed(0)
    bcos = ModelAdapter("bcos", "bcos", bcos_digit_cnn().eval(), bcos_inverse(1), 10, (28, 28), logit_bias=-math.log(9))
    maps = torch.randn(2, 28, 28)
    units = [
        _unit("input_x_gradient", maps, {}),
        _unit("integrated_gradients", maps * (1 + 5e-6), {"baseline": 0.0, "n_steps": 8}),
        _unit("gradient", maps * (1 + 2e-5), {"abs": False}),  # just outside the tolerance
    ]
    pairs = fingerprints.identical_pairs(bcos, units)
    assert len(pairs) == 1 and pairs[0]["status"] == "expected"
    assert "positively homogeneous" in identity.verdict(pairs[0])
    assert fingerprints.relative_difference(torch.zeros(3), torch.zeros(3)) == 0.0
    assert torch.equal(fingerprints.decode(units[0]["fingerprint"]), maps.reshape(2, -1))
