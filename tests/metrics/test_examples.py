"""Every metric function the docs present (``::: name`` on a page of docs/metrics/) carries a worked example in its
docstring, as torchmetrics' functions do, and the example's output is what the function returns (doctest)."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from faithbench.metrics import toy as toy_module
from faithbench.metrics.toy import additive_text_model, linear_image_model

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics"
DOCUMENTED = sorted({m for page in DOCS.glob("*.md") for m in re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M)})


def _function(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_pages_present_the_metric_functions():
    assert len(DOCUMENTED) >= 18 and "faithbench.metrics.pixel_deletion" in DOCUMENTED


@pytest.mark.parametrize("dotted", DOCUMENTED)
def test_example_runs_as_written(dotted: str):
    function = _function(dotted)
    tests = doctest.DocTestFinder(recurse=False).find(function, dotted, globs={})
    assert tests and tests[0].examples, f"{dotted} has no example in its docstring"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"{dotted}: its example's output differs (see above)"


def test_a_wrong_example_fails():
    def f():
        """>>> 1 + 1
        3
        """

    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder(recurse=False).find(f, "f", globs={}):
        runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False).failed == 1


def test_the_toy_models_are_additive():
    image, text = linear_image_model(), additive_text_model()
    for toy in (image, text):
        logits = toy.forward(toy.inputs)
        assert logits[0, 0] == toy.attributions.sum() and logits[0, 1] == 0
        kept = toy.inputs.clone().flatten(1)
        kept[:, 0] = 0  # removing a feature lowers logit 0 by its weight
        assert toy.forward(kept.view_as(toy.inputs))[0, 0] == logits[0, 0] - toy.attributions.flatten(1)[0, 0]
    assert image.attributions.shape == (1, 4, 4) and text.attributions.shape == (1, 4)


def test_the_toy_models_examples_run():
    assert doctest.testmod(toy_module, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
