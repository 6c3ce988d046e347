"""The run's cost estimate (issue 30, ``bench run --dry-run``): what the methods and metrics declare adds up to the
model inputs the runner measures, exactly where nothing is estimated; every method and metric declares its cost;
the dry run prints it and computes nothing."""

import pandas as pd
import pytest
import torch

from faithbench.attributions import METHODS, AttributionMethod
from faithbench.attributions.native import NativeNormalisedInput
from faithbench.bench.cli.run import dry_run
from faithbench.bench.estimate.counts import estimate, stand_in
from faithbench.bench.run.counters import measuring
from faithbench.bench.run.data import load_data
from faithbench.bench.run.plan import resolve
from faithbench.bench.run.runner import run
from faithbench.bench.run.suite import build_suite
from faithbench.metrics.registry import METRICS
from faithbench.models import load_model

# Every kind of cost: the gradient family sharing one forward pass per grid (batch_size 3 cuts a ViT's windows across
# calls), DeepLift's baseline beside its input, IG's steps, LIME's and Shapley sampling's draws deduplicated, ViT
# windows, the native positional term, the randomised cascade, MoRF/LeRF once for three metrics, a per-model grid
# selection and the predicted classes paid once per model and piece, two pieces.
SUITE = {
    "name": "estimate",
    "dataset": "mnist",
    "models": ["bcosified_cnn_mnist", "bcos_vit_mnist"],
    "methods": [
        "native",
        "native_normalised",
        "gradient",
        "integrated_gradients",
        "deeplift",
        "gradcam",
        "lime",
        "shapley_sampling",
        "attention_rollout",
    ],  # fmt: skip
    "controls": ["random", "oracle"],
    "metrics": [
        "gridpg",
        "pixel_deletion",
        "morf",
        "lerf",
        "srg",
        "road",
        "comprehensiveness",
        "sufficiency",
        "entropy",
        "completeness_gap",
        "positional_share",
        "randomisation",
    ],  # fmt: skip
    "seed": 0,
    "n_samples": 5,
    "batch_size": 3,
    "pieces": 2,
    "gridpg": {"n_grids": 1},
    "deletion": {"block_size": 7, "fractions": [0.0, 0.5]},
    "flipping": {"block_size": 7, "fractions": [0.0, 0.5, 1.0]},
    "road": {"fractions": [0.5]},
    "randomisation": {"n_samples": 2, "n_depths": 2},
    "method_params": {
        "integrated_gradients": {"n_steps": 3},
        "lime": {"n_samples": 8, "segmentation": "slic"},  # its segment count estimated: the grid of slic's centres
        "shapley_sampling": {"n_samples": 2, "segmentation": "patches", "segmentation_params": {"grid": 3}},
    },
}
TOLERANCE = 0.10  # estimated units (notes: segment counts, misclassified samples explained again): within 10 %


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> pd.DataFrame:
    """The suite run: its result rows' measured model inputs and calls, per unit."""
    out, threads = tmp_path_factory.mktemp("estimate") / "run", torch.get_num_threads()
    torch.set_num_threads(1)  # 15 s; two threads on two busy cores took minutes (the counts are the same)
    try:
        rows = run(build_suite(SUITE), out, device="cpu", progress=False)
    finally:
        torch.set_num_threads(threads)
    return rows.groupby(["model", "method"], sort=False)[["model_inputs", "model_calls"]].sum()


def _estimated(models: dict | None = None):
    suite = build_suite(SUITE)
    return estimate(resolve(suite), models, len(load_data(suite).labels))


def test_the_estimate_equals_the_measured_model_inputs(measured, monkeypatch):
    rows = measured
    models = {name: load_model(name) for name in SUITE["models"]}
    # The runner counts outermost calls of the model's modules: native_normalised calls the layers of a B-cosified
    # Sequential one by one (layer 0, then each of the rest), so each image (and call) counts once per layer there.
    monkeypatch.setattr(NativeNormalisedInput, "model_inputs_per_explanation", lambda self, model: len(model.module))
    cost = _estimated(models)
    units = cost.units.set_index(["model", "method"])
    assert set(units.index) == set(rows.index)  # the same units are skipped (the models are loaded)
    refused = {("bcos_vit_mnist", m) for m in ("native_normalised", "deeplift", "gradcam")}
    assert set(cost.skipped) == refused | {("bcosified_cnn_mnist", "attention_rollout")}
    shared = cost.models.set_index("model")
    assert (shared["before inputs"] == 0).all()  # per-model grids: nothing is chosen for every model
    for model, group in rows.groupby(level="model"):
        # the work a model's units share (its grid selection, the predicted classes) is paid by its first unit
        assert (
            group["model_inputs"].sum() == units.loc[model, "model inputs"].sum() + shared.loc[model, "shared inputs"]
        )
    assert units["notes"].map(len).any()  # LIME's slic segments, samples misclassified (none of these 5)
    for (model, method), unit in units.iterrows():
        first = rows.loc[model].index[0] == method
        got = rows.loc[(model, method)] - (
            shared.loc[model, ["shared inputs", "shared calls"]].to_numpy() if first else 0
        )
        for column, estimated in (("model_inputs", unit["model inputs"]), ("model_calls", unit["model calls"])):
            if column == "model_calls" and method == "native_normalised":
                continue  # its layers count as calls, too
            if unit["notes"]:  # an estimate: within the tolerance
                assert abs(got[column] - estimated) <= TOLERANCE * estimated, (model, method, column, unit["notes"])
            else:
                assert got[column] == estimated, (model, method, column)


def test_the_stand_ins_give_the_loaded_models_estimates():
    """The zoo's recipes say all a cost needs: the dry run's stand-ins estimate what the loaded models do, for every
    unit both accept (whether a model's layers take a method is known only once it loads)."""
    loaded = _estimated({name: load_model(name) for name in SUITE["models"]}).units.set_index(["model", "method"])
    described = _estimated().units.set_index(["model", "method"])
    both = loaded.index.intersection(described.index)
    assert len(both) == len(loaded)
    pd.testing.assert_frame_equal(
        loaded.loc[both, ["model inputs", "model calls"]], described.loc[both, ["model inputs", "model calls"]]
    )
    unknown = described[~described["known"]].index
    assert ("bcos_vit_mnist", "deeplift") in unknown and ("bcos_vit_mnist", "native_normalised") in unknown


@pytest.mark.parametrize(
    ("name", "params", "model_name"),
    [
        ("gradient", {}, "cnn_mnist"),
        ("integrated_gradients", {"n_steps": 5, "internal_batch_size": 4}, "cnn_mnist"),
        ("deeplift", {}, "cnn_mnist"),
        ("guided_backprop", {}, "cnn_mnist"),
        ("lrp", {}, "bcos_cnn_mnist"),
        ("native", {}, "bcos_vit_mnist"),
        ("attention_rollout", {}, "vit_mnist"),
        ("chefer_cam", {}, "vit_mnist"),
        ("lime", {"n_samples": 8, "segmentation": "patches", "segmentation_params": {"grid": 2}}, "cnn_mnist"),
        (
            "shapley_sampling",
            {"n_samples": 3, "segmentation": "patches", "segmentation_params": {"grid": 3}},
            "vit_mnist",
        ),
        ("edges", {}, "cnn_mnist"),
    ],
)
def test_each_method_costs_what_it_declares(name, params, model_name):
    """Two images explained for two targets each (GridPG's cells): the model inputs the runner's counter sees are
    the declared inputs per explanation, once per distinct image where the method shares equal inputs (LIME's 8
    draws of 4 segments repeat, Shapley's 3 permutations of 9 share prefixes)."""
    model, method = load_model(model_name), METHODS.get(name)(**params)
    images = load_data(build_suite(SUITE)).images[:2]
    inputs, targets = model.encode(images).repeat_interleave(2, dim=0), torch.tensor([0, 1, 2, 3])
    with measuring(model.module, torch.device("cpu")) as cost:
        method.attribute(model, inputs, targets, max_batch=8)
    per, share = method.model_inputs_per_explanation(model), method.shares_equal_inputs(model)
    assert cost.model_inputs == (2 if share else 4) * per
    assert cost.model_calls == method.model_calls(2 if share else 4, per, 8)
    if name == "lime":
        assert per < 8  # repeated draws are evaluated once


def test_every_registered_method_and_metric_declares_a_cost():
    """faithbench's own (a plugin's need not: the estimate counts one pass per explanation, or none, and says so)."""
    vit, cnn = stand_in("bcos_vit_mnist"), stand_in("bcosified_cnn_mnist")
    methods = {name: cls for name, cls in METHODS.items() if cls.__module__.startswith("faithbench.")}
    assert len(methods) >= 24
    for name, cls in methods.items():
        assert cls.model_inputs_per_explanation is not AttributionMethod.model_inputs_per_explanation, name
        model = cnn if cls.capabilities.cnn else vit
        assert isinstance(cls().model_inputs_per_explanation(model), int), name
    metrics = {
        name: spec
        for name, spec in METRICS.items()
        if getattr(spec.evaluate, "__module__", "").startswith("faithbench.")
    }
    assert len(metrics) >= 20 and not [name for name, spec in metrics.items() if spec.cost is None]


def test_a_shared_grid_selection_is_paid_before_the_units():
    """Grids shared by every model: each deciding model runs over the data set once before any unit; none in a unit."""
    suite = build_suite({**SUITE, "gridpg": {"n_grids": 2, "pairing": "shared"}})
    cost = estimate(resolve(suite), None, 1000)
    models = cost.models.set_index("model")
    assert (models["before inputs"] == 1000).all()
    assert (models["shared inputs"] == 5).all()  # the predicted classes of the 5 samples (3 + 2 in two pieces)


def test_a_dry_run_prints_the_estimate_and_computes_nothing(tmp_path, capsys, monkeypatch):
    def no_forward(*args, **kwargs):
        raise AssertionError("a dry run called a model")

    monkeypatch.setattr(torch.nn.Module, "__call__", no_forward)
    out = tmp_path / "run"
    assert dry_run(build_suite(SUITE), out) == 0
    text = capsys.readouterr().out
    inputs, calls = _estimated().total()
    assert "model inputs ≈" in text and "model calls ≈" in text  # the per-model table's columns
    words = " ".join(text.split())
    assert f"≈ {inputs:,} model inputs in all: an estimate of the images through the models" in words
    assert "(a backward pass counted with its forward;" in words and "not of model calls" in words
    assert (
        f"≈ {calls:,} calls on the CPU at batch_size 3 (inputs explained a call), at most 256 inputs a model" in words
    )
    assert "the CPU's; on a GPU calls start at 16,384 inputs and their sizes are found at run time" in words
    assert "~ slic: 49 segments" in words  # LIME's estimated segment count, as a note
    assert not out.exists()
