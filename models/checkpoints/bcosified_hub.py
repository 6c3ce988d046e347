"""The B-cosification release's ImageNet checkpoints (Arya et al., NeurIPS 2024; GitHub ``shrebox/B-cosification``).

The release (README "Checkpoints" and "List of experiments") publishes its B-cosified CNNs and ViTs as assets of
the GitHub release ``v0.0.1-checkpoints``: PyTorch Lightning checkpoints of the experiments ``resnet_18``,
``resnet_50``, ``resnet_50_V1``, ``densenet_121`` (``bcos/experiments/ImageNet/bcosification``) and
``bcosifyv2_bcos_<vit>_0.001[_lrWarmup]_gapReorder`` for the eight ``bcos`` SimpleViTs / ViT-Cs (the config keys
of ``bcos/experiments/ImageNet/vit_bcosification/experiment_parameters.py``, which the README abbreviates as
``bcosifyv2_{model_name}_0.001_lrWarmup_gapReorder`` and qualifies: "only b and l models use lrWarmup"; read at
commit de03a03). The README names the release page but not the asset files (they are renamed ``last.ckpt`` and
read by the release's ``evaluate.py --reload last``), so nothing here downloads on its own: each checkpoint is read
where the README says to put it, ``<root>/ImageNet/<base_network>/<experiment>/last.ckpt`` (``root``:
``$FAITHBENCH_BCOSIFICATION_DIR``, e.g. the release's own ``experiments/`` folder, else
``<torch hub dir>/bcosification``), or from ``checkpoint=PATH_OR_URL``. A missing file stops the load with one line
naming the experiment, the release page and the path it goes to.

The architectures are re-created in the release's module layout (its ``get_model`` functions, ``bcosify.py`` and
``bcosify_vit.py``), with :func:`~faithbench.models.bcosify.bcosify` doing the conversion (the same layers,
see its docstring):

- CNNs (``ResNetBcos`` / ``DenseNetBcos`` in ``bcos/models/standard_models.py``): torchvision's network with its
  classifier as a 1x1 convolution applied before global average pooling (``gap=True``, "GAP reorder"); max pooling
  becomes ``AvgPool2d(3, 2, 1)``; the release's ``BcosSequential`` swap re-indexes DenseNet's named Sequentials.
- ViTs: the ``bcos`` hub's standard SimpleViT / ViT-C (the release starts from ``standard_<arch>``), with
  ``gap_reorder`` (the head classifies every token, then the logits are averaged); ``to_qkv`` stays plain.
- Both: [x, 1 - x] input normalised with ImageNet statistics as layer 0, B = 2, no biases, logit bias -log(999).

``pretrained=False`` builds the same architecture from a seeded random teacher, with no download.
"""

from __future__ import annotations

import os
import pathlib
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from bcos.models.vit import SimpleViT
from einops import rearrange
from torch import Tensor, nn
from torchvision.models import DenseNet, ResNet
from torchvision.models.resnet import BasicBlock, Bottleneck

from faithbench.errors import UserError
from faithbench.models.adapter import ModelAdapter
from faithbench.models.bcosify import bcosify, linear_as_conv1x1
from faithbench.models.checkpoints.hub import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    _first_line,
    _seeded_build,
    _torch_hub_hint,
    logit_bias,
)
from faithbench.models.encoding import bcos_inverse

RELEASE_PAGE = "https://github.com/shrebox/B-cosification/releases/tag/v0.0.1-checkpoints"
LICENCE = "Apache-2.0 code; ImageNet-trained weights (ImageNet terms: non-commercial research)"
ROOT_ENV = "FAITHBENCH_BCOSIFICATION_DIR"


@dataclass(frozen=True)
class Bcosified:
    """One released checkpoint: its architecture (torchvision or ``bcos`` hub name), experiment and teacher."""

    arch: str
    experiment: str
    teacher: str

    @property
    def is_vit(self) -> bool:
        return "vit" in self.arch

    @property
    def base_network(self) -> str:
        return "vit_bcosification" if self.is_vit else "bcosification"


def _vit_experiment(arch: str) -> str:
    size = arch.split("_")[-3]  # simple_vit_b_patch16_224 -> b, vitc_l_patch1_14 -> l
    return f"bcosifyv2_bcos_{arch}_0.001{'_lrWarmup' if size in ('b', 'l') else ''}_gapReorder"


_VITS = tuple(
    f"{kind}_{s}_{patch}"
    for kind, patch in (("simple_vit", "patch16_224"), ("vitc", "patch1_14"))
    for s in "ti s b l".split()
)
# Registry name -> checkpoint; teachers from the release's experiment_parameters.py (CNNs), vit_bcosification/model.py.
BCOSIFIED: dict[str, Bcosified] = {
    "bcosified_resnet18": Bcosified("resnet18", "resnet_18", "torchvision ResNet18_Weights.DEFAULT"),
    "bcosified_resnet50": Bcosified("resnet50", "resnet_50", "torchvision ResNet50_Weights.DEFAULT (V2)"),
    "bcosified_resnet50_v1": Bcosified("resnet50", "resnet_50_V1", "torchvision ResNet50_Weights.IMAGENET1K_V1"),
    "bcosified_densenet121": Bcosified("densenet121", "densenet_121", "torchvision DenseNet121_Weights.DEFAULT"),
    **{f"bcosified_{a}": Bcosified(a, _vit_experiment(a), f"bcos hub standard_{a}") for a in _VITS},
}


def experiments_root() -> str:
    """``$FAITHBENCH_BCOSIFICATION_DIR``, else ``<torch hub dir>/bcosification``: the release's ``experiments/``."""
    return os.environ.get(ROOT_ENV) or os.path.join(torch.hub.get_dir(), "bcosification")


def checkpoint_path(entry: Bcosified) -> str:
    """Where the release's README puts a checkpoint: ``<root>/ImageNet/<base_network>/<experiment>/last.ckpt``."""
    return os.path.join(experiments_root(), "ImageNet", entry.base_network, entry.experiment, "last.ckpt")


# --------------------------------------------------------------------------- architectures


class GapReorderResNet(ResNet):
    """torchvision's ResNet with ``fc`` (a 1x1 convolution here) applied before global average pooling."""

    def _forward_impl(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.avgpool(self.fc(x)).flatten(1)


class GapReorderDenseNet(DenseNet):
    """torchvision's DenseNet with ``classifier`` (a 1x1 convolution here) applied before global average pooling."""

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(self.classifier(F.relu(self.features(x))), 1).flatten(1)


class GapReorderViT(SimpleViT):
    """The ``bcos`` SimpleViT with B-cosification's ``gap_reorder``: the head classifies every token, then the
    logits are averaged over tokens (instead of classifying the averaged token)."""

    def forward(self, img: Tensor) -> Tensor:
        x = self.to_patch_embedding(img)
        x = rearrange(x, "b ... d -> b (...) d") + self.positional_embedding(x)
        return self.linear_head(self.to_latent(self.transformer(x))).mean(dim=1)


def _indexed(seq: nn.Sequential) -> nn.Sequential:
    """A Sequential's children re-indexed 0, 1, ... (the release's ``BcosSequential.from_standard_module``)."""
    return nn.Sequential(*seq.children())


def _teacher(arch: str) -> nn.Module:
    """The random standard network in the release's layout, before the B-cos conversion."""
    if arch in ("resnet18", "resnet50"):
        net: nn.Module = GapReorderResNet(
            *{"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet50": (Bottleneck, [3, 4, 6, 3])}[arch]
        )
        net.fc = linear_as_conv1x1(net.fc)
        return net
    if arch == "densenet121":
        net = GapReorderDenseNet(32, (6, 12, 24, 16), 64)
        # features and its _Transition blocks are Sequentials the release re-indexes; _DenseBlock is a ModuleDict
        net.features = _indexed(
            nn.Sequential(*(_indexed(m) if isinstance(m, nn.Sequential) else m for m in net.features.children()))
        )
        net.classifier = linear_as_conv1x1(net.classifier)
        return net
    from bcos.models import pretrained

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vit = getattr(pretrained, f"standard_{arch}")(pretrained=False)
    for attribute in ("config", "transform"):  # attached by the hub loader; not part of the network
        vars(vit).pop(attribute, None)
    vit.__class__ = GapReorderViT
    return vit


def architecture(entry: Bcosified) -> nn.Sequential:
    """The release's B-cosified network with seeded random weights: ``Sequential(normalise [x, 1 - x], net, logit
    bias)``; ``[1]`` holds the keys of the release's ``BcosifyNetwork.model``."""

    def build() -> nn.Sequential:
        first = (
            ("to_patch_embedding.conv_stem.0" if "vitc" in entry.arch else "to_patch_embedding.linear")
            if entry.is_vit
            else None
        )
        return bcosify(
            _teacher(entry.arch),
            image_channels=3,
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            first_layer=first,
            num_classes=1000,
            classifier_before_pooling=False,  # the teacher is in the release's reordered layout already
        )

    return _seeded_build(build)


# --------------------------------------------------------------------------- checkpoints


def release_state_dict(checkpoint: dict) -> dict[str, Tensor]:
    """The network's weights in a release checkpoint: a Lightning checkpoint's ``state_dict`` under ``model.``
    (the LightningModule's model, the release's ``BcosifyNetwork``) and ``model.`` again (its network); a state
    dict stripped of either prefix (``scripts/strip_checkpoints.py``) is taken as it is."""
    state = checkpoint.get("state_dict", checkpoint)
    for prefix in ("model.model.", "model."):
        picked = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        if picked:
            return picked
    return dict(state)


def _read(source: str, experiment: str) -> dict:
    # Lightning checkpoints can hold paths (callback state); only those are allowed beyond tensors and containers.
    with torch.serialization.safe_globals([pathlib.PosixPath, pathlib.WindowsPath]):
        if source.startswith(("http://", "https://")):
            try:
                return torch.hub.load_state_dict_from_url(source, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - network / file errors differ by platform
                raise UserError(
                    f"could not load the B-cosification release's {experiment} checkpoint: {_first_line(exc)}; "
                    + _torch_hub_hint(source)
                ) from exc
        try:
            return torch.load(source, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001
            raise UserError(f"could not read the {experiment} checkpoint {source}: {_first_line(exc)}") from exc


def weights_source(entry: Bcosified, checkpoint: str | None = None) -> str:
    """``checkpoint`` (a path or URL), else the README's path, which must exist: one line says where it goes."""
    source = checkpoint or checkpoint_path(entry)
    if checkpoint is None and not os.path.isfile(source):
        raise UserError(
            f"the B-cosification release's {entry.experiment} checkpoint is not at {source}: on a machine with "
            f"internet download that experiment's asset from {RELEASE_PAGE} and save it as that file (or set "
            f"{ROOT_ENV} to a copy of the release's experiments/ folder; from Python, pass checkpoint=PATH_OR_URL), "
            "then run again"
        )
    return source


def load_release_weights(net: nn.Module, entry: Bcosified, source: str) -> None:
    """Load the release's weights for ``entry`` from ``source`` into ``net`` (``architecture(entry)[1]``)."""
    state = release_state_dict(_read(source, entry.experiment))
    try:
        result = net.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shapes differ
        raise UserError(f"{source} does not match the release's {entry.experiment} layout: {_first_line(exc)}") from exc
    if result.missing_keys or result.unexpected_keys:
        raise UserError(
            f"{source} does not match the release's {entry.experiment} layout: "
            f"{len(result.missing_keys)} missing (e.g. {result.missing_keys[:3]}), "
            f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:3]})"
        )


def conv_layer(entry: Bcosified) -> str | None:
    """GradCAM's layer: the last convolutional block (inside the adapter's Sequential, hence ``1.``)."""
    return None if entry.is_vit else ("1.layer4" if entry.arch.startswith("resnet") else "1.features")


def bcosified_model(name: str):
    """The registry builder of a released B-cosified checkpoint (``pretrained=False``: seeded random weights)."""
    entry = BCOSIFIED[name]

    def build(
        device: str | torch.device = "cpu", pretrained: bool = True, checkpoint: str | None = None
    ) -> ModelAdapter:
        weights = weights_source(entry, checkpoint) if pretrained else "random, seed 0"
        module = architecture(entry)
        if pretrained:
            load_release_weights(module[1], entry, weights)
        return ModelAdapter(
            name=name,
            family="bcosified",
            module=module.eval(),
            encoding=bcos_inverse(3),
            num_classes=1000,
            input_size=(224, 224),
            is_vit=entry.is_vit,
            activation="sigmoid",
            logit_bias=logit_bias(module),
            conv_layer=conv_layer(entry),
            description=f"B-cosified {entry.arch} (B-cosification release, experiment {entry.experiment})",
            info={
                "source": "bcosification-release",
                "release": RELEASE_PAGE,
                "experiment": entry.experiment,
                "teacher": entry.teacher,
                "weights": weights,
                "licence": LICENCE,
            },
        ).to(device)

    return build
