"""Real checkpoints (torchvision, the bcos hub, ALOE on Hugging Face): random instances of the architectures run
the ViT methods, offline loads fail with one line naming the file and where it goes, ALOE's wrapper."""

import os
import subprocess
import sys
import urllib.error
from types import SimpleNamespace

import pytest
import torch
from bcos.modules import LogitLayer
from torch import nn

from faithbench.attributions import get_method
from faithbench.errors import UserError
from faithbench.models.checkpoints import hub
from faithbench.models.registry import MODELS, load_model

VIT_METHODS = ("attnlrp", "chefer_cam", "attention_rollout")


def test_every_bcos_hub_entry_has_its_download_address_and_a_registry_name():
    from bcos.models import pretrained

    for entry, (base, experiment) in hub.BCOS_HUB.items():
        assert pretrained.URLS[base][experiment].endswith(".pth")
        assert entry in pretrained.list_available()
        assert hub.bcos_hub_name(entry) in MODELS


@pytest.mark.parametrize(
    "entry",
    [
        "simple_vit_ti_patch16_224",
        "vitc_ti_patch1_14",
        "standard_simple_vit_ti_patch16_224",
        "standard_vitc_ti_patch1_14",
    ],
)
def test_random_bcos_hub_vits_run_every_vit_method(entry):
    model = load_model(hub.bcos_hub_name(entry), pretrained=False)
    assert model.family == ("standard" if entry.startswith("standard_") else "bcos") and model.is_vit
    x = model.encode(torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0)))
    targets = torch.tensor([3, 999])
    for method in VIT_METHODS + (("native",) if model.has_native_explanation else ()):
        maps = get_method(method).attribute(model, x, targets)
        assert maps.shape == (2, 224, 224) and torch.isfinite(maps).all(), method
        assert maps.abs().sum() > 0, method
    if model.has_native_explanation:  # bias-free B-cos ViT: AttnLRP at gamma 0 is W(x)x
        lrp0 = get_method("attnlrp", conv_gamma=0.0, linear_gamma=0.0).attribute(model, x, targets)
        native = get_method("native").attribute(model, x, targets)
        # A random B-cos ViT's logits are tiny (~1e-5), so the Gamma rule's 1e-6 stabiliser shows: compare shapes.
        assert torch.corrcoef(torch.stack([lrp0.flatten(), native.flatten()]))[0, 1] > 0.99


def test_random_torchvision_vit_b_16_is_seeded_and_runs_every_vit_method():
    model = load_model("vit_b_16_random")
    assert model.weights_sha256 == load_model("vit_b_16_random").weights_sha256  # same random weights each time
    x = model.encode(torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)))
    for method in VIT_METHODS:
        maps = get_method(method).attribute(model, x, torch.tensor([7]))
        assert maps.shape == (1, 224, 224) and torch.isfinite(maps).all() and maps.abs().sum() > 0, method


def test_random_resnet50s_are_seeded_registry_models_that_need_no_download(monkeypatch):
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", _offline)  # nothing may be fetched
    for name, family in (("resnet50_random", "standard"), ("bcos_resnet50_random", "bcos")):
        model = load_model(name)
        assert (model.name, model.family, model.info["weights"]) == (name, family, "random, seed 0")
        assert model.weights_sha256 == load_model(name).weights_sha256
        x = model.encode(torch.rand(1, 3, 224, 224, generator=torch.Generator().manual_seed(0)))
        maps = get_method("input_x_gradient").attribute(model, x, torch.tensor([7]))
        assert maps.shape == (1, 224, 224) and torch.isfinite(maps).all() and maps.abs().sum() > 0
    assert load_model("bcos_resnet50_random").activation == "sigmoid"


def _offline(*_args, **_kwargs):
    raise urllib.error.URLError("[Errno -2] Name or service not known")


def test_offline_bcos_and_torchvision_loads_name_the_file_and_the_folder(monkeypatch):
    import torchvision.models._api

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", _offline)
    monkeypatch.setattr(torchvision.models._api, "load_state_dict_from_url", _offline)
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    for name, url in (
        ("bcos_simple_vit_ti_patch16_224", "bcos_simple_vit_ti_patch16_224-4b0824b1c1.pth"),
        ("standard_vitc_ti_patch1_14", "standard_vitc_ti_patch1_14-a5d6bded37.pth"),
        ("vit_b_16", "vit_b_16-c867db91.pth"),
    ):
        with pytest.raises(UserError) as info:
            load_model(name)
        message = str(info.value)
        assert "\n" not in message and url in message and folder in message and "URLError" in message, message


def test_unknown_torchvision_weights_list_the_valid_ones():
    with pytest.raises(UserError, match="valid: IMAGENET1K_V1"):
        load_model("vit_b_16", weights="IMAGENET9K")


def test_offline_aloe_load_names_the_repository_and_the_download_command(tmp_path):
    keep = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    env = {**keep, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    code = (
        "from faithbench.models.registry import load_model\n"
        "try:\n    load_model('aloe_siglip2_base_in1k_lp')\n"
        "except Exception as e:\n    print(type(e).__name__ + ': ' + str(e))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300).stdout
    line = out.strip().splitlines()[-1]
    assert line.startswith("UserError: could not load ALOE checkpoint rmaser/aloe-siglip2-base-in1k-lp"), out
    assert "huggingface-cli download rmaser/aloe-siglip2-base-in1k-lp" in line and str(tmp_path) in line


class _StandInAloe(nn.Module):
    """The interface of ALOE's Hugging Face classifiers: ``config.num_labels``, ``forward(pixel_values=)``
    returning ``.logits``, ``explain(x, idx=)`` returning a ``contribution_map``, and a logit layer."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_labels=4)
        self.head = nn.Linear(6, 4, bias=False)
        self.logit_layer = LogitLayer(logit_bias=-1.5)
        self.explained = []

    def forward(self, pixel_values):
        return SimpleNamespace(logits=self.logit_layer(self.head(pixel_values.mean((2, 3)))))

    def explain(self, x, idx):
        self.explained.append((x.shape, idx.tolist()))
        return {"contribution_map": torch.ones(x.shape[0], 1, *x.shape[2:])}


def test_aloe_wrapper_normalises_then_inverts_and_explains_with_the_models_own_explain():
    processor = SimpleNamespace(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], size={"height": 32, "width": 32})
    stand_in = _StandInAloe()
    model = hub.aloe_adapter("aloe_test", stand_in, processor, "rmaser/aloe-test")
    images = torch.rand(2, 3, 32, 32)
    x = model.encode(images)
    z = (images - 0.5) / 0.5
    torch.testing.assert_close(x, torch.cat([z, 1 - z], dim=1))  # ALOE's order: normalise, then [z, 1 - z]
    torch.testing.assert_close(model.encoding.decode(x), images)
    assert (model.family, model.input_size, model.num_classes, model.activation) == ("aloe", (32, 32), 4, "sigmoid")
    assert model.logit_bias == -1.5
    torch.testing.assert_close(model.module(x), stand_in(pixel_values=x).logits)
    maps = get_method("native").attribute(model, x, torch.tensor([1, 3]))
    assert maps.shape == (2, 32, 32) and stand_in.explained == [((2, 6, 32, 32), [1, 3])]
    with pytest.raises(UserError, match="has no image_std, size; cannot encode"):  # no silent ImageNet guess
        hub.aloe_adapter("aloe_test", stand_in, SimpleNamespace(image_mean=[0.5] * 3), "rmaser/aloe-test")
