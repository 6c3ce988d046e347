"""The B-cosification release's checkpoints: registered by name, read in the release's Lightning format, one-line
failures when the file is missing or the download fails, and the release's module layout on random instances."""

import os
import pathlib
import urllib.error

import pytest
import torch

from faithbench.attributions import get_method
from faithbench.errors import UserError
from faithbench.models.checkpoints import bcosified_hub as bh
from faithbench.models.registry import MODELS, load_model

VIT_METHODS = ("attnlrp", "chefer_cam", "attention_rollout")
# Key names and shapes of the release's own networks (``BcosifyNetwork.model``), read off models built by its code
# (bcos/experiments/ImageNet/{bcosification,vit_bcosification}/model.py, bcosify.py, bcosify_vit.py at
# shrebox/B-cosification de03a03): how many keys, and a few of them with their shapes. No key is a bias.
RELEASE_LAYOUT = {
    "bcosified_resnet18": (
        101,
        {
            "conv1.linear.weight": (64, 6, 7, 7),
            "bn1.running_mean": (64,),
            "layer1.0.conv1.linear.weight": (64, 64, 3, 3),
            "layer4.1.bn2.num_batches_tracked": (),
            "fc.linear.weight": (1000, 512, 1, 1),  # the classifier as a 1x1 convolution before pooling
        },
    ),
    "bcosified_densenet121": (
        605,
        {
            "features.0.linear.weight": (64, 6, 7, 7),  # the release's BcosSequential re-indexes features
            "features.1.weight": (64,),
            "features.4.denselayer1.norm1.weight": (64,),
            "features.10.denselayer16.conv2.linear.weight": (32, 128, 3, 3),
            "features.11.running_var": (1024,),
            "classifier.linear.weight": (1000, 1024, 1, 1),
        },
    ),
    "bcosified_simple_vit_ti_patch16_224": (
        75,
        {
            "to_patch_embedding.linear.linear.weight": (192, 1536),  # (W/2, -W/2) per pixel of the 6 channels
            "transformer.encoder_0.attn.norm.weight": (192,),
            "transformer.encoder_0.attn.to_qkv.weight": (576, 192),  # stays a plain linear layer
            "transformer.encoder_0.attn.to_out.linear.weight": (192, 192),
            "transformer.encoder_11.ff.net.linear2.linear.weight": (192, 768),
            "linear_head.linear.linear.weight": (1000, 192),
        },
    ),
    "bcosified_vitc_ti_patch1_14": (
        77,
        {
            "to_patch_embedding.conv_stem.0.linear.weight": (24, 6, 3, 3),
            "to_patch_embedding.conv_stem.1.weight": (24,),
            "to_patch_embedding.conv_stem.9.linear.weight": (192, 96, 3, 3),
            "to_patch_embedding.linear.linear.weight": (192, 192),
            "transformer.encoder_10.ff.net.linear1.linear.weight": (768, 192),
            "linear_head.norm.weight": (192,),
        },
    ),
}


def test_every_release_checkpoint_is_registered_by_name_with_its_experiment():
    assert len(bh.BCOSIFIED) == 12
    experiments = {name: entry.experiment for name, entry in bh.BCOSIFIED.items()}
    for name in bh.BCOSIFIED:
        assert name in MODELS and MODELS[name].family == "bcosified" and MODELS[name].source == "gh-release"
    assert [experiments[f"bcosified_{a}"] for a in ("resnet18", "resnet50", "resnet50_v1", "densenet121")] == [
        "resnet_18",
        "resnet_50",
        "resnet_50_V1",
        "densenet_121",
    ]
    # the release's config names (vit_bcosification/experiment_parameters.py); warm-up for the b and l sizes
    assert (
        experiments["bcosified_simple_vit_ti_patch16_224"]
        == "bcosifyv2_bcos_simple_vit_ti_patch16_224_0.001_gapReorder"
    )
    assert experiments["bcosified_vitc_l_patch1_14"] == "bcosifyv2_bcos_vitc_l_patch1_14_0.001_lrWarmup_gapReorder"
    entry = bh.BCOSIFIED["bcosified_resnet50_v1"]
    path = os.path.join("ImageNet", "bcosification", "resnet_50_V1", "last.ckpt")
    assert bh.checkpoint_path(entry).endswith(path)


def test_a_missing_checkpoint_stops_with_one_line_naming_the_experiment_the_release_and_the_path(monkeypatch, tmp_path):
    monkeypatch.setenv(bh.ROOT_ENV, str(tmp_path))
    with pytest.raises(UserError) as info:
        load_model("bcosified_resnet50_v1")
    message = str(info.value)
    expected = tmp_path / "ImageNet" / "bcosification" / "resnet_50_V1" / "last.ckpt"
    assert "\n" not in message and str(expected) in message and bh.RELEASE_PAGE in message, message
    assert "resnet_50_V1" in message


def test_an_offline_download_names_the_file_and_the_folder(monkeypatch):
    def offline(*_args, **_kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    url = "https://example.org/checkpoints/bcosifyv2_bcos_vitc_ti_patch1_14_0.001_gapReorder.ckpt"
    with pytest.raises(UserError) as info:
        load_model("bcosified_vitc_ti_patch1_14", checkpoint=url)
    message = str(info.value)
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    assert "\n" not in message and url in message and folder in message and "URLError" in message, message


@pytest.mark.parametrize("name", list(RELEASE_LAYOUT))
def test_random_instances_have_the_release_layout_and_read_its_lightning_checkpoints(name, tmp_path):
    count, anchors = RELEASE_LAYOUT[name]
    model = load_model(name, pretrained=False)
    net = model.module[1]
    state = net.state_dict()
    assert len(state) == count and not [k for k in state if k.endswith("bias")]
    assert {k: tuple(state[k].shape) for k in anchors} == anchors
    assert (model.family, model.activation, model.encoding.channels) == ("bcosified", "sigmoid", 6)
    assert model.logit_bias == pytest.approx(-torch.log(torch.tensor(999.0)).item())

    # A Lightning checkpoint as the release stores it: the LightningModule's ``model.`` (BcosifyNetwork), its
    # ``model.`` (the network), and callback state holding paths.
    changed = {k: v + 0.01 if v.is_floating_point() else v for k, v in state.items()}
    path = tmp_path / "last.ckpt"
    torch.save(
        {
            "state_dict": {f"model.model.{k}": v for k, v in changed.items()},
            "epoch": 89,
            "callbacks": {"ModelCheckpoint": {"dirpath": pathlib.PosixPath("/runs")}},
        },
        path,
    )
    loaded = load_model(name, checkpoint=str(path))
    assert loaded.info["weights"] == str(path) and loaded.info["experiment"] == bh.BCOSIFIED[name].experiment
    for k, v in loaded.module[1].state_dict().items():
        torch.testing.assert_close(v, changed[k], msg=k)

    if name != "bcosified_densenet121":  # slow on CPU (121 B-cos convolutions); its layout is checked above
        x = model.encode(torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
        logits = loaded.module(x)
        assert logits.shape == (2, 1000) and torch.isfinite(logits).all()
        maps = loaded.explain_native(x, torch.tensor([1, 999]))
        assert maps.shape == (2, 6, 32, 32) and torch.isfinite(maps).all()


def test_a_checkpoint_of_another_architecture_is_refused_with_one_line(tmp_path):
    path = tmp_path / "resnet18.ckpt"
    torch.save(
        {
            "state_dict": {
                f"model.model.{k}": v
                for k, v in bh.architecture(bh.BCOSIFIED["bcosified_resnet18"])[1].state_dict().items()
            }
        },
        path,
    )
    with pytest.raises(UserError, match="does not match the release's densenet_121 layout") as info:
        load_model("bcosified_densenet121", checkpoint=str(path))
    assert "\n" not in str(info.value)


def test_a_random_bcosified_vit_runs_every_vit_method():
    model = load_model("bcosified_simple_vit_ti_patch16_224", pretrained=False)
    assert model.is_vit and model.has_native_explanation
    x = model.encode(torch.rand(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)))  # 4 x 4 patches
    for method in (*VIT_METHODS, "native"):
        maps = get_method(method).attribute(model, x, torch.tensor([3, 999]))
        assert maps.shape == (2, 64, 64) and torch.isfinite(maps).all() and maps.abs().sum() > 0, method
