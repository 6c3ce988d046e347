"""Model registry: the offline zoo, and real checkpoints (torchvision, the bcos package's hub, the B-cosification
release, ALOE on Hugging Face)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from faithbench.models import zoo
from faithbench.models.adapter import ModelAdapter, ModelFacts, ModelSpec
from faithbench.models.checkpoints import bcosified_hub, hub, weight_files
from faithbench.models.encoding import bcos_inverse, normalized
from faithbench.models.text_encoding import MAX_LENGTH, text_adapter
from faithbench.models.truth import image_exact, token_exact
from faithbench.registry import Registry

MODELS: Registry[ModelSpec] = Registry("model")


def _zoo(name: str) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        recipe = zoo.RECIPES.get(name)
        module, info = zoo.build(name)
        if recipe.modality == "text":
            return text_adapter(
                name=name,
                family=recipe.family,
                transformer=module,
                num_classes=recipe.num_classes,
                activation=recipe.activation,
                description=recipe.description,
                info={"source": "zoo", **info},
                tokenizer=recipe.tokenizer,
            ).to(device)
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


def _zoo_spec(name: str) -> ModelSpec | None:
    """The model of zoo recipe ``name`` (a registered one, or a further build ``NAME@K`` derived on first use)."""
    if name not in zoo.RECIPES:
        return None
    recipe = zoo.RECIPES.get(name)
    return ModelSpec(
        name=name,
        family=recipe.family,
        source="zoo",
        description=recipe.description,
        build=_zoo(name),
        modality=recipe.modality,
        dataset=recipe.dataset,
        tokenizer=recipe.tokenizer,
        encoding=recipe.encoding if recipe.modality == "image" else None,
        facts=ModelFacts(
            input_size=(28, 28) if recipe.modality == "image" else (MAX_LENGTH,),
            num_classes=recipe.num_classes,
            is_vit=recipe.is_vit,
            conv_layer=recipe.conv_layer,
            positional_embedding=recipe.is_vit,  # the zoo's ViTs are the bcos SimpleViT's
        ),
    )


def _imagenet(is_vit: bool, positional: bool = False, native: bool = False) -> ModelFacts:
    """An ImageNet classifier's facts: 224 px, 1,000 classes, GradCAM's ``layer4`` where it is a ResNet."""
    return ModelFacts(input_size=(224, 224), num_classes=1000, is_vit=is_vit, conv_layer=None if is_vit else "layer4",
                      positional_embedding=positional, native_explainer=native)  # fmt: skip


for _name in zoo.RECIPES:
    MODELS.register(_name, _zoo_spec(_name))
MODELS.derive = _zoo_spec  # NAME@K: build K of zoo model NAME, found by name, never listed
for _arch, _vit in (("resnet18", False), ("resnet50", False), ("vit_b_16", True)):
    MODELS.register(
        _arch,
        ModelSpec(
            name=_arch,
            family="standard",
            source="torchvision",
            description=f"torchvision {_arch}, ImageNet weights",
            build=hub.torchvision_model(_arch, is_vit=_vit, conv_layer=_imagenet(_vit).conv_layer),
            weight_file=weight_files.torchvision_file(_arch),
            architecture=hub.torchvision_architecture(_arch),
            encoding=normalized(hub.IMAGENET_MEAN, hub.IMAGENET_STD),
            facts=_imagenet(_vit),  # torchvision's ViT adds its positional embedding as a parameter
        ),
    )
# The ImageNet architectures with seeded random weights and no download: they run every method on the real networks
# and measure what they cost (the imagenet-random suite); their scores describe untrained networks.
_RANDOM = "randomly initialised (seed 0): runs the architecture with no download"
for _name, _build, _facts in (
    ("resnet50_random", hub.torchvision_model("resnet50", is_vit=False, conv_layer="layer4", pretrained=False),
     _imagenet(False)),
    ("vit_b_16_random", hub.torchvision_model("vit_b_16", is_vit=True, conv_layer=None, pretrained=False),
     _imagenet(True)),
    ("bcos_resnet50_random", hub.bcos_hub_model("resnet50", is_vit=False, conv_layer="layer4", random=True),
     _imagenet(False)),
):  # fmt: skip
    _arch = _name.removesuffix("_random").removeprefix("bcos_")
    _from = "B-cos " + _arch + " (bcos package)" if _name.startswith("bcos_") else "torchvision " + _arch
    MODELS.register(
        _name,
        ModelSpec(
            name=_name,
            family="bcos" if _name.startswith("bcos_") else "standard",
            source="bcos-hub" if _name.startswith("bcos_") else "torchvision",
            description=f"{_from}, {_RANDOM}",
            build=_build,
            facts=_facts,
        ),
    )
for _entry in hub.BCOS_HUB:
    _standard, _vit = hub.is_standard(_entry), "vit" in _entry
    MODELS.register(
        hub.bcos_hub_name(_entry),
        ModelSpec(
            name=hub.bcos_hub_name(_entry),
            family="standard" if _standard else "bcos",
            source="bcos-hub",
            description=(
                f"{'standard' if _standard else 'B-cos'} {_entry.removeprefix('standard_')}, bcos package ImageNet "
                "weights"
            ),
            build=hub.bcos_hub_model(_entry, is_vit=_vit, conv_layer=None if _vit else "layer4"),
            weight_file=weight_files.bcos_hub_file(_entry),
            architecture=hub.bcos_architecture(_entry),
            encoding=hub.hub_encoding(_entry),
            facts=_imagenet(_vit, positional=_vit),
        ),
    )
for _name, _entry in bcosified_hub.BCOSIFIED.items():
    MODELS.register(
        _name,
        ModelSpec(
            name=_name,
            family="bcosified",
            source="gh-release",
            description=(
                f"B-cosified {_entry.arch}, B-cosification release experiment {_entry.experiment} (file placed by hand)"
            ),
            build=bcosified_hub.bcosified_model(_name),
            weight_file=weight_files.bcosified_file(_name),
            architecture=lambda _e=_entry: bcosified_hub.architecture(_e),
            encoding=bcos_inverse(3),
            facts=replace(
                _imagenet(_entry.is_vit, positional=_entry.is_vit), conv_layer=bcosified_hub.conv_layer(_entry)
            ),
        ),
    )
for _repo in hub.ALOE_CLASSIFIERS:
    MODELS.register(
        hub.registry_name(_repo),
        ModelSpec(
            name=hub.registry_name(_repo),
            family="aloe",
            source="huggingface",
            description=(
                f"ALOE {_repo.split('/')[-1]}: ImageNet-1k linear probe on an aligned B-cos ViT (CC BY-NC-SA 4.0)"
            ),
            build=hub.aloe_model(_repo),
            weight_file=weight_files.hugging_face_folder(_repo),
            facts=_imagenet(True, positional=True, native=True),  # it brings its own explainer (model.explain)
        ),
    )

for _spec in (
    *image_exact.SPECS,
    *token_exact.SPECS,
):  # hand-set: the ground-truth tier (their exact attribution is known)
    MODELS.register(_spec.name, _spec)


def load_model(name: str, device: str | torch.device = "cpu", **kwargs) -> ModelAdapter:
    """Build the adapter registered as ``name`` (unknown names list the valid ones)."""
    return MODELS.get(name).build(device=device, **kwargs)
