"""The command line as a user meets it."""

import subprocess
import sys

import pytest

from bench.cli import main
from faithbench.registry import Registry


def test_list_via_python_dash_m_shows_metrics_and_presets():
    out = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, check=True)
    for name in (
        "gridpg",
        "seqpg",
        "comprehensiveness",
        "sufficiency",
        "pixel_deletion",
        "pixel_insertion",
        "entropy",
        "entropy_normalised",
        "gini",
        "bcos-v2",
        "bcosification",
        "aloe",
        "eraser",
        "bcos-lm",
        "models:",
        "methods:",
        "suites:",
    ):
        assert name in out.stdout


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["explode"])
    assert exc.value.code == 2
    assert "invalid choice: 'explode'" in capsys.readouterr().err


def test_registry_lookup_names_the_valid_choices():
    reg: Registry[int] = Registry("model")
    reg.register("resnet18", 1)
    reg.register("bcos_resnet18", 2)
    assert reg.get("resnet18") == 1 and reg.names() == ["bcos_resnet18", "resnet18"]
    with pytest.raises(KeyError, match="unknown model 'vgg'; valid models: bcos_resnet18, resnet18"):
        reg.get("vgg")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("resnet18", 3)


def test_metric_registry_directions():
    from metrics.registry import METRICS

    assert METRICS.get("gridpg").higher_is_better and not METRICS.get("pixel_deletion").higher_is_better
    assert not METRICS.get("sufficiency").higher_is_better and METRICS.get("comprehensiveness").higher_is_better
    assert METRICS.get("gridpg").presets == ("bcos-v2", "bcosification", "aloe")


def test_zoo_command_rejects_unknown_models(capsys):
    assert main(["zoo", "resnet9"]) == 2
    assert "unknown zoo model(s) resnet9; valid: cnn_mnist" in capsys.readouterr().err


def test_list_shows_every_registered_model_with_its_family():
    out = subprocess.run([sys.executable, "-m", "bench", "list"], capture_output=True, text=True, check=True).stdout
    for name, family in (
        ("cnn_mnist", "standard"),
        ("bcos_cnn_mnist", "bcos"),
        ("bcosified_cnn_mnist", "bcosified"),
        ("aloe_vit_mnist", "aloe"),
    ):
        assert any(line.split()[:2] == [name, family] for line in out.splitlines())
