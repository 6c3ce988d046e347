"""The suites that use the zoo's test bed name registered models and load (issue 11, items 7-9)."""

from faithbench.bench.run.plan import metric_jobs
from faithbench.bench.run.suite import load_suite
from faithbench.models.zoo.entries import TEST_BED


def _config(suite, metric):
    """The config the run gives ``metric`` (the plan resolves it)."""
    return next(m.config for m in metric_jobs(suite) if m.name == metric)


def test_ablation_suite_covers_every_b_and_bias_variant():
    suite = load_suite("bcos-ablation")
    assert set(suite.methods) == {"native", "integrated_gradients", "input_x_gradient"} and "gridpg" in suite.metrics
    variants = {r.name for r in TEST_BED if "_b" in r.name.removeprefix("bcos") or r.name.endswith("_bias")}
    assert variants <= set(suite.models)
    assert {"bcosified_cnn_gap_mnist", "bcos_cnn_mnist", "cnn_gap_mnist"} <= set(suite.models)
    assert _config(suite, "gridpg").preset == "bcos-v2"


def test_vision_suite_compares_the_vits_and_the_gap_cnns():
    models = set(load_suite("vision").models)
    assert {
        "bcos_vit_mnist",
        "bcosified_vit_mnist",
        "aloe_vit_mnist",
        "cnn_gap_mnist",
        "bcosified_cnn_gap_mnist",
    } <= models


def test_the_vit_suite_pairs_each_builds_standard_vit_bcos_vit_and_vitc():
    suite = load_suite("bcos-vit")
    names = ("vit_mnist", "bcos_vit_mnist", "bcos_vitc_mnist")
    assert set(suite.models) == {f"{m}{b}" for m in names for b in ("", "@2", "@3")}
    assert suite.builds == 3 and _config(suite, "gridpg").pairing == "shared-by-build"
