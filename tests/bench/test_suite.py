"""Suite loading: every name, table, key, value and method parameter is checked before any model loads."""

import subprocess
import sys

import pytest

from faithbench.bench.cli import main
from faithbench.bench.run import runner, work
from faithbench.bench.run.plan import metric_jobs
from faithbench.bench.run.suite import build_suite, load_suite, with_overrides
from faithbench.errors import UserError
from faithbench.metrics.deletion import DeletionConfig
from faithbench.metrics.gridpg import GridPGConfig


def _config(suite, metric):
    """The config the run gives ``metric`` (the plan resolves it)."""
    return next(m.config for m in metric_jobs(suite) if m.name == metric)


BASE = 'name = "t"\nmodels = ["cnn_mnist"]\nmethods = ["gradient"]\nmetrics = ["gini"]\n'


@pytest.fixture
def no_models(monkeypatch):
    """Fail the test if anything tries to build a model (validation must come first)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the suite was validated")

    monkeypatch.setattr(runner, "load_model", forbidden)
    monkeypatch.setattr(work, "load_model", forbidden)


def write(tmp_path, text):
    path = tmp_path / "suite.toml"
    path.write_text(BASE + text)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[deletion]\nblock-size = 4\n", r"\[deletion\] has unknown key\(s\) block-size; valid keys: .*block_size, "),
        ("[gridpg]\nn_grids = -1\n", r"\[gridpg\]: n_grids must be a positive integer or 0 \(every selectable"),
        ('[gridpg]\npreset = "tpami"\n', r"unknown GridPG preset 'tpami'; valid GridPG presets: aloe, bcos-v2"),
        ('[erasure]\nsummary = "aopc"\n', r"\[erasure\]: unknown comprehensiveness/sufficiency summary 'aopc'"),
        ("[deletion]\nfractions = [0.5, 0.2]\n", r"\[deletion\]: fractions must be strictly increasing"),
        ('[deletion]\nblock_size = "4"\n', r"\[deletion\]: block_size must be a positive integer, got '4'"),
        (
            "[grid_pg]\nn_grids = 2\n",
            r"unknown key\(s\) grid_pg; .*tables: gridpg, seqpg, deletion, flipping, road, single_deletion, erasure, "
            r"naopc, compactness, robustness, consistency, continuity, cam_scores, infidelity, completeness, "
            r"randomisation, smprt, random_logit, truth, "
            r"method_params",
        ),
        (
            "[method_params.lime]\nn_sample = 3\n",
            r"\[method_params.lime\]: method 'lime' has no parameter\(s\) n_sample",
        ),
        ('[method_params.lime]\nsegmentation = "felz"\n', r"segmentation must be one of 'auto', 'quickshift', 'slic'"),
        ('[method_params.lrp]\ncomposite = "zplus"\n', r"parameter composite must be one of 'epsilon_plus_flat'"),
        ("[method_params.integrated_gradients]\nn_steps = 0\n", r"n_steps must be >= 1, got 0"),
        ("[method_params.lime_v2]\nn_samples = 3\n", r"unknown method\(s\) lime_v2 \(did you mean lime\?\); valid"),
        ("seed = -1\n", r"seed must be >= 0, got -1"),
        ("n_samples = 1.5\n", r"n_samples must be a int, got 1.5"),
    ],
)
def test_bad_suite_values_fail_at_load_naming_file_and_key(tmp_path, extra, message, no_models):
    path = write(tmp_path, extra)
    with pytest.raises(UserError, match=message) as exc:
        load_suite(path)
    assert str(exc.value).startswith(path)
    assert "\n" not in str(exc.value)


def test_a_string_instead_of_a_list_is_named_as_such(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('name = "t"\nmodels = "cnn_mnist"\nmethods = ["gradient"]\nmetrics = ["gini"]\n')
    with pytest.raises(UserError, match=r"models must be a list of names, e.g. \[\"cnn_mnist\"\], got 'cnn_mnist'"):
        load_suite(str(path))


def test_bad_method_params_fail_before_any_model_is_loaded(tmp_path, no_models, capsys):
    path = write(tmp_path, "[method_params.gradient]\nabsolute = true\n")
    assert main(["run", "--suite", path, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no parameter(s) absolute; valid: abs" in err
    assert not (tmp_path / "out").exists()


def test_text_metrics_say_text_only_in_run_and_in_list(tmp_path, capsys):
    with pytest.raises(UserError, match=r"metric 'seqpg' is text only \(dataset 'mnist' is image\); metrics for image"):
        with_overrides(load_suite("smoke"), metrics=["seqpg"])
    assert main(["run", "--suite", "smoke", "--metrics", "seqpg", "--out", str(tmp_path)]) == 2
    assert "metric 'seqpg' is text only" in capsys.readouterr().err
    listing = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, check=True).stdout
    line = next(x for x in listing.splitlines() if x.split()[:1] == ["seqpg"])
    assert "text" in line.split() and "image" not in line and "not runnable" not in listing


def test_every_listed_metric_either_runs_or_says_why_not():
    from faithbench.metrics.registry import METRICS

    for name, spec in METRICS.items():
        why = spec.availability("image")
        if why is None:
            assert spec.evaluate is not None
            build_suite({"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": [name]})
        else:
            with pytest.raises(UserError, match=f"metric '{name}' is {why}"):
                build_suite({"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": [name]})


def test_configs_are_typed_with_defaults_once():
    suite = load_suite("smoke")
    assert isinstance(_config(suite, "gridpg"), GridPGConfig) and _config(suite, "gridpg").n_grids == 4
    assert _config(suite, "pixel_deletion") is _config(suite, "pixel_insertion")
    assert isinstance(_config(suite, "pixel_deletion"), DeletionConfig)
    bare = build_suite({"name": "t", "models": ["cnn_mnist"], "methods": ["gradient"], "metrics": ["gridpg"]})
    assert _config(bare, "gridpg") == GridPGConfig()
    again = build_suite(suite.to_dict())
    assert again == suite


def test_cli_overrides_are_validated_like_the_file(tmp_path, capsys):
    assert main(["run", "--suite", "smoke", "--n-grids", "-1", "--out", str(tmp_path)]) == 2
    assert "[gridpg]: n_grids must be a positive integer or 0 (every selectable grid), got -1" in (
        capsys.readouterr().err
    )
    assert main(["run", "--suite", "smoke", "--n-samples", "0", "--out", str(tmp_path)]) == 2
    assert "n_samples must be >= 1, got 0" in capsys.readouterr().err
    assert main(["run", "--suite", "smoke", "--device", "tpu", "--out", str(tmp_path)]) == 2
    assert "device 'tpu'" in capsys.readouterr().err
    bad = tmp_path / "broken.toml"
    bad.write_text("name = [unclosed\n")
    assert main(["run", "--suite", str(bad)]) == 2
    assert f"suite file {bad} is not valid TOML" in capsys.readouterr().err
    assert not (tmp_path / "run.json").exists()


def test_nothing_is_written_before_the_checks_pass(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "--suite", "imagenet", "--out", str(out)]) == 2
    assert "needs a data root (--data-root, or data_root in a suite file)" in capsys.readouterr().err
    assert not out.exists()
    assert main(["run", "--suite", "imagenet", "--data-root", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert not out.exists()


def test_smoke_suite_covers_every_method_and_every_image_metric():
    """CI's gate runs the smoke suite from a fresh install: a missing dependency of any method fails it."""
    from faithbench.attributions import METHODS
    from faithbench.metrics.registry import METRICS

    smoke, text = load_suite("smoke"), load_suite("smoke-text")
    assert smoke.tiers == ("truth",)  # the ground-truth tier runs after the smoke suite, into OUT/truth
    truth = load_suite("truth")
    methods = set(smoke.all_methods) | set(text.all_methods) | set(truth.all_methods)
    assert methods == set(METHODS)  # controls included (controls = true)
    image_metrics = {name for name, spec in METRICS.items() if spec.availability("image") is None}
    # entropy_positive: gated by smoke-text; the truth metrics apply to the hand-set models of the tier only
    assert image_metrics - {"entropy_positive", "truth_correlation", "truth_mass"} == set(smoke.metrics)
    assert {"truth_correlation", "truth_mass"} <= set(truth.metrics)
    text_metrics = {name for name, spec in METRICS.items() if spec.availability("text") is None}
    assert set(text.metrics) == text_metrics - {"truth_correlation", "truth_mass"}  # the token tier's (truth-text)
    assert text.tiers == ("truth-text",) and load_suite("text").tiers == ("truth-text",)
    truth_text = load_suite("truth-text")
    assert truth_text.modality == "text" and {"truth_correlation", "truth_mass"} <= set(truth_text.metrics)
    assert set(truth_text.all_methods) <= set(text.all_methods) | set(truth.all_methods)
    assert text.modality == "text" and {"seqpg", "entropy_positive"} <= set(text.metrics)


def test_models_must_match_the_data_sets_modality_and_classes():
    base = {"name": "t", "methods": ["gradient"], "metrics": ["entropy"]}
    with pytest.raises(
        UserError, match=r"model 'cnn_mnist' is an image model and dataset 'rotten-tomatoes' is text; models"
    ):
        build_suite({**base, "models": ["cnn_mnist"], "dataset": "rotten-tomatoes"})
    with pytest.raises(UserError, match=r"model 'minilm_rt' is a text model and dataset 'mnist' is image"):
        build_suite({**base, "models": ["minilm_rt"], "dataset": "mnist"})
    with pytest.raises(
        UserError, match=r"model 'minilm_rt' predicts the classes of dataset 'rotten-tomatoes', not 'imdb'"
    ):
        build_suite({**base, "models": ["minilm_rt"], "dataset": "imdb"})
    assert build_suite({**base, "models": ["minilm_rt"], "dataset": "rotten-tomatoes"}).modality == "text"
    with pytest.raises(
        UserError, match=r"model 'cnn_mnist' predicts the classes of dataset 'mnist', not 'animal-mnist'"
    ):
        build_suite({**base, "models": ["cnn_mnist"], "dataset": "animal-mnist"})
    with pytest.raises(
        UserError, match=r"read different vocabularies \(tokenizers\): bert_agnews \(wordpiece-uncased\), roberta_"
    ):
        build_suite({**base, "models": ["bert_agnews", "roberta_agnews"], "dataset": "ag-news"})
    assert build_suite({**base, "models": ["bert_agnews", "bcos_distilbert_agnews"], "dataset": "ag-news"})


def test_text_data_is_tokenized_with_the_models_vocabulary(monkeypatch):
    from faithbench.bench.run import data

    seen = []
    monkeypatch.setattr(data, "_load", lambda dataset, root, tokenizer=None: seen.append((dataset, tokenizer)))
    base = {"name": "t", "methods": ["gradient"], "metrics": ["entropy"]}
    data.load_data(build_suite({**base, "models": ["roberta_imdb"], "dataset": "imdb"}))
    data.load_data(build_suite({**base, "models": ["minilm_rt"], "dataset": "rotten-tomatoes"}))
    data.load_data(build_suite({**base, "models": ["cnn_mnist"]}))
    assert seen == [("imdb", "roberta-base"), ("rotten-tomatoes", "wordpiece-uncased"), ("mnist", None)]


def test_a_text_suite_without_a_removal_baseline_gets_the_text_default():
    base = {"name": "t", "models": ["minilm_rt"], "methods": ["gradient"], "dataset": "rotten-tomatoes"}
    suite = build_suite({**base, "metrics": ["comprehensiveness"]})
    assert _config(suite, "comprehensiveness").baseline == "mask-token"  # the B-cos LM code's
    given = build_suite({**base, "metrics": ["comprehensiveness"], "erasure": {"baseline": "pad-token"}})
    assert _config(given, "comprehensiveness").baseline == "pad-token"
    image = build_suite({**base, "models": ["cnn_mnist"], "dataset": "mnist", "metrics": ["comprehensiveness"]})
    assert _config(image, "comprehensiveness").baseline == "mean"
