"""Model registry: the offline zoo, torchvision models and the bcos package's pretrained B-cos models."""

from __future__ import annotations

from collections.abc import Callable

import torch
from bcos.modules import LogitLayer
from torch import nn

from faithbench.errors import UserError
from faithbench.registry import Registry
from models import zoo
from models.adapter import ModelAdapter, ModelSpec
from models.encoding import bcos_inverse, normalized

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

MODELS: Registry[ModelSpec] = Registry("model")


def _logit_bias(module: nn.Module) -> float:
    return sum(float(m.logit_bias or 0.0) for m in module.modules() if isinstance(m, LogitLayer))


def _offline_error(what: str, exc: Exception) -> UserError:
    return UserError(
        f"could not load {what}: {type(exc).__name__}: {exc}. Pretrained weights are downloaded on "
        f"first use; without internet, copy the checkpoint file into {torch.hub.get_dir()}/checkpoints/, "
        f"or use an offline zoo model ({', '.join(zoo.RECIPES)})"
    )


def _zoo(name: str) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        recipe = zoo.RECIPES.get(name)
        module, info = zoo.build(name)
        return ModelAdapter(
            name=name,
            family=recipe.family,
            module=module,
            encoding=recipe.encoding,
            num_classes=10,
            input_size=(28, 28),
            is_vit=recipe.is_vit,
            activation=recipe.activation,
            logit_bias=recipe.logit_bias,
            conv_layer=recipe.conv_layer,
            description=recipe.description,
            info={"source": "zoo", **info},
        ).to(device)

    return build


def _torchvision(arch: str, is_vit: bool, conv_layer: str | None) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu", weights: str = "DEFAULT") -> ModelAdapter:
        import torchvision

        try:
            module = torchvision.models.get_model(arch, weights=weights)
        except Exception as exc:  # noqa: BLE001 - network / file errors differ by platform
            raise _offline_error(f"torchvision weights {weights!r} for {arch}", exc) from exc
        return ModelAdapter(
            name=arch,
            family="standard",
            module=module,
            encoding=normalized(IMAGENET_MEAN, IMAGENET_STD),
            num_classes=1000,
            input_size=(224, 224),
            is_vit=is_vit,
            conv_layer=conv_layer,
            description=f"torchvision {arch} ({weights} weights)",
            info={"source": "torchvision", "weights": weights},
        ).to(device)

    return build


def _bcos_hub(entry: str, is_vit: bool, conv_layer: str | None) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        from bcos.models import pretrained

        try:
            module = getattr(pretrained, entry)(pretrained=True)
        except Exception as exc:  # noqa: BLE001
            raise _offline_error(f"the bcos package's pretrained {entry}", exc) from exc
        return ModelAdapter(
            name=f"bcos_{entry}",
            family="bcos",
            module=module,
            encoding=bcos_inverse(3),
            num_classes=1000,
            input_size=(224, 224),
            is_vit=is_vit,
            activation="sigmoid",
            logit_bias=_logit_bias(module),
            conv_layer=conv_layer,
            description=f"B-cos {entry} (official bcos package weights)",
            info={"source": "bcos-hub"},
        ).to(device)

    return build


for _name, _recipe in zoo.RECIPES.items():
    MODELS.register(_name, ModelSpec(_name, _recipe.family, "zoo", _recipe.description, _zoo(_name)))
for _arch, _vit, _layer in (
    ("resnet18", False, "layer4"),
    ("resnet50", False, "layer4"),
    ("vit_b_16", True, None),
):
    MODELS.register(
        _arch,
        ModelSpec(
            _arch,
            "standard",
            "torchvision",
            f"torchvision {_arch}, ImageNet weights",
            _torchvision(_arch, _vit, _layer),
        ),
    )
for _entry, _vit, _layer in (
    ("resnet18", False, "layer4"),
    ("resnet50", False, "layer4"),
    ("simple_vit_ti_patch16_224", True, None),
):
    MODELS.register(
        f"bcos_{_entry}",
        ModelSpec(
            f"bcos_{_entry}",
            "bcos",
            "bcos-hub",
            f"B-cos {_entry}, official ImageNet weights",
            _bcos_hub(_entry, _vit, _layer),
        ),
    )


def load_model(name: str, device: str | torch.device = "cpu", **kwargs) -> ModelAdapter:
    """Build the adapter registered as ``name`` (unknown names list the valid ones)."""
    return MODELS.get(name).build(device=device, **kwargs)
