"""The model-adapter protocol every family implements, and the native W(x)x explanation."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from bcos.common import explanation_mode
from torch import Tensor, nn

from faithbench.activations import to_probabilities
from faithbench.calls import in_chunks, name_calls
from faithbench.models.encoding import InputEncoding

FAMILIES = ("standard", "bcos", "bcosified", "aloe")
MODALITIES = ("image", "text")


@dataclass
class ModelAdapter:
    """A classifier plus everything the suite needs to know about it.

    Attributes:
        module: maps encoded input (B, encoding.channels, H, W) to logits (B, num_classes).
        encoding: how images in [0, 1] become module input.
        input_size: (H, W) of one image; ``fixed_input`` models (ViTs with learned geometry) only
            take that size, so GridPG explains grids through sliding windows.
        is_vit: whether the model is a vision transformer (GridPG presets treat ViTs differently).
        activation: how logits become probabilities (``softmax``, or ``sigmoid`` for B-cos models
            trained with BCE).
        logit_bias: the input-independent constant every logit carries (B-cos ``LogitLayer``);
            W(x)x sums to ``logit - logit_bias``.
        conv_layer: dotted name of the last convolutional block (GradCAM), if any.
        info: provenance and held-out accuracy.
        native_explainer: ``(inputs, targets) -> contributions`` for models that bring their own W(x)x
            (ALOE's Hugging Face checkpoints: ``model.explain``); None: input x gradient in bcos'
            explanation mode.
        modality: ``image``, or ``text`` (inputs are token ids, encoded to embeddings (B, D, T):
            :mod:`faithbench.models.text_encoding`; a token is a feature).
        truth: ``(inputs, targets) -> (B, H, W)`` (text: (B, T)) the exact attribution of models whose attribution
            is known by construction (the hand-set models of :mod:`faithbench.models.truth.image_exact`, its
            ``cells`` attribute the (H, W) cell of every pixel, where the truth is exact; the token models of
            :mod:`faithbench.models.truth.token_exact`, exact per token, ``cells`` None); None for every other model.
    """

    name: str
    family: str
    module: nn.Module
    encoding: InputEncoding  # or a TokenEncoding for text models
    num_classes: int
    input_size: tuple[int, int]
    is_vit: bool = False
    activation: str = "softmax"
    logit_bias: float = 0.0
    conv_layer: str | None = None
    description: str = ""
    info: dict = field(default_factory=dict)
    native_explainer: Callable[[Tensor, Tensor], Tensor] | None = None
    modality: str = "image"
    truth: Callable[[Tensor, Tensor], Tensor] | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; valid families: {', '.join(FAMILIES)}")
        if self.modality not in MODALITIES:
            raise ValueError(f"unknown modality {self.modality!r}; valid: {', '.join(MODALITIES)}")
        self.module.eval()
        name_calls(self.module, self.name)  # its chunked calls' sizes are kept under the model's name

    def feature_mask(self, raw: Tensor) -> Tensor | None:
        """(B, *S) bool, the features of raw inputs (text: not [CLS] / [SEP] / [PAD]); None: every feature."""
        return self.encoding.feature_mask(raw) if self.modality == "text" else None

    @property
    def has_native_explanation(self) -> bool:
        return self.family != "standard"

    def to(self, device: torch.device | str) -> ModelAdapter:
        self.module.to(device)
        return self

    def encode(self, images: Tensor) -> Tensor:
        return self.encoding(images)

    def __call__(self, inputs: Tensor) -> Tensor:
        return self.module(inputs)

    def probabilities(self, logits: Tensor) -> Tensor:
        return to_probabilities(logits, self.activation)

    def predict_logits(self, images: Tensor, batch_size: int = 500, device: torch.device | None = None) -> Tensor:
        """Logits of images in [0, 1], encoded and classified in batches on ``device``; returned on the host."""
        key = (self.name, "predict", tuple(images.shape[1:]), "without gradients")
        return predict_logits(self.module, self.encode, images, batch_size, device, key)

    @cached_property
    def weights_sha256(self) -> str:
        """SHA-256 of the weights and buffers: the identity of the checkpoint (part of the resume key)."""
        return state_sha256(self.module.state_dict())

    def explain_native(self, inputs: Tensor, targets: Tensor) -> Tensor:
        """W(x)x contributions (B, C, H, W) of input dimension d to logit ``targets[b]``.

        One forward and one backward for the whole batch, in explanation mode (every dynamic
        factor detached), on a fresh leaf copy of ``inputs``. Sum over channels for pixel maps.
        """
        if not self.has_native_explanation:
            raise TypeError(
                f"model {self.name!r} ({self.family}) has no native explanation; use a post-hoc method "
                "or a B-cos / B-cosified / ALOE model"
            )
        if self.native_explainer is not None:
            return self.native_explainer(inputs, targets)
        return input_x_gradient(self.module, inputs, targets, explanation=True)


@torch.no_grad()
def predict_logits(
    module: nn.Module,
    encode: Callable[[Tensor], Tensor],
    images: Tensor,
    batch_size: int = 500,
    device: torch.device | None = None,
    key: Hashable | None = None,
) -> Tensor:
    """Logits of ``images`` in batches of at most ``batch_size`` (each moved to ``device`` if given; smaller after an
    out-of-memory error, kept for ``key``: :func:`faithbench.calls.in_chunks`), returned on the host."""
    module.eval()

    def call(start: int, stop: int) -> Tensor:
        return module(encode(images[start:stop].to(device))).cpu()

    return torch.cat(in_chunks(call, len(images), batch_size, key=key))


def state_sha256(state: dict[str, Tensor]) -> str:
    """SHA-256 over the sorted names and raw bytes of a state dict."""
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def input_x_gradient(module: nn.Module, inputs: Tensor, targets: Tensor, *, explanation: bool) -> Tensor:
    """x * d logit_target / dx for a batch (one backward), optionally in B-cos explanation mode."""
    if targets.shape != (inputs.shape[0],):
        raise ValueError(f"targets must have shape ({inputs.shape[0]},), got {tuple(targets.shape)}")
    x = inputs.detach().clone().requires_grad_(True)  # fresh leaf: no gradient accumulates across calls
    with torch.enable_grad():
        if explanation:
            with explanation_mode(module):
                logits = module(x)
        else:
            logits = module(x)
        selected = logits.gather(1, targets.long().view(-1, 1).to(logits.device)).sum()
        (grad,) = torch.autograd.grad(selected, x)
    return (grad * x).detach()


POSITIONAL_EMBEDDING = "positional_embedding"  # the bcos SimpleViT's module (every ViT of the zoo, bcosify, ALOE)


def positional_embeddings(module: nn.Module) -> list[nn.Module]:
    """The modules of ``module`` that add input-independent positional embeddings to the tokens."""
    return [m for name, m in module.named_modules() if name.rsplit(".", 1)[-1] == POSITIONAL_EMBEDDING]


def positional_contribution(module: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor | None:
    """(B,) the positional embeddings' contribution to logit ``targets[b]`` in explanation mode, or None for a
    model without one.

    A bias-free B-cos ViT is dynamic linear in its first token states ``h = E(x) + p``: the logit is
    ``W(x) E(x) + W(x) p``. The pixel map W(x)x shows the first term; the second, ``sum_{n,d} p_nd
    d logit / d p_nd``, belongs to no pixel. One forward and one backward, with every positional
    embedding's output made a per-sample leaf.
    """
    modules = positional_embeddings(module)
    if not modules:
        return None
    leaves: list[Tensor] = []

    def as_leaf(_: nn.Module, args: tuple, out: Tensor) -> Tensor:
        batch = args[0].shape[0]
        per_sample = out.expand(batch, *out.shape) if out.dim() == 2 else out  # (tokens, dim): one for the batch
        leaves.append(per_sample.detach().clone().requires_grad_(True))
        return leaves[-1]

    handles = [m.register_forward_hook(as_leaf) for m in modules]
    try:
        with torch.enable_grad(), explanation_mode(module):
            logits = module(inputs.detach())
            selected = logits.gather(1, targets.long().view(-1, 1).to(logits.device)).sum()
            grads = torch.autograd.grad(selected, leaves)
    finally:
        for h in handles:
            h.remove()
    return sum((g * leaf).flatten(1).sum(1) for g, leaf in zip(grads, leaves, strict=True)).detach()


@dataclass(frozen=True)
class ModelFacts:
    """What a model is before its weights load: all a dry run reads of it (``ModelSpec.facts``; nothing is read from
    its name). ``input_size``: one input's (H, W), a text model's (tokens,); ``positional_embedding``: it has a module
    named :data:`POSITIONAL_EMBEDDING` (the native methods' cost counts it); ``native_explainer``: it brings its own
    W(x)x; ``truth``: its exact attribution is known."""

    input_size: tuple[int, ...]
    num_classes: int
    is_vit: bool = False
    conv_layer: str | None = None
    positional_embedding: bool = False
    native_explainer: bool = False
    truth: bool = False

    @classmethod
    def of(cls, adapter: ModelAdapter) -> ModelFacts:
        """The facts of a loaded model."""
        return cls(
            input_size=tuple(adapter.input_size),
            num_classes=adapter.num_classes,
            is_vit=adapter.is_vit,
            conv_layer=adapter.conv_layer,
            positional_embedding=bool(positional_embeddings(adapter.module)),
            native_explainer=adapter.native_explainer is not None,
            truth=adapter.truth is not None,
        )


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A registry entry: how to build one model adapter."""

    name: str
    family: str
    source: str  # "zoo" (built offline), "torchvision", "bcos-hub", "gh-release" (B-cosification), "huggingface"
    description: str
    build: Callable[..., ModelAdapter]
    modality: str = "image"
    dataset: str | None = None  # the data set whose classes it predicts (zoo models); None: any of its modality
    tokenizer: str | None = None  # text models: the vocabulary of their token ids (the data is tokenized with it)
    # pretrained weights read from disk: () -> models.checkpoints.weight_files.WeightFile (checked before a run)
    weight_file: Callable[[], Any] | None = None
    # its network, untrained (seeded random weights, no download): the shapes a dry run probes its memory on
    architecture: Callable[[], nn.Module] | None = None
    encoding: InputEncoding | None = None  # what it reads, where known before it loads (a dry run's stand-in)
    facts: ModelFacts | None = None  # what it is, where known before it loads (None: a dry run says it guessed)
