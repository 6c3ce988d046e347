"""Real pretrained checkpoints: torchvision, the ``bcos`` package's hub, and ALOE's on Hugging Face.

Each loader runs the library's own loading code (weights are downloaded on first use). Offline, the
download fails and the loader stops with one line that names the file to fetch and where it goes.
``pretrained=False`` builds a randomly initialised instance of the same architecture (seeded), where the
library allows it: architecture tests and runs need no download. ALOE's architecture is custom code that
lives with its weights on the Hub, so it has no random instance.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import torch
from bcos.modules import LogitLayer
from torch import Tensor, nn

from faithbench.errors import UserError
from faithbench.models.adapter import ModelAdapter
from faithbench.models.encoding import InputEncoding, aloe_inverse, bcos_inverse, normalized

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LICENCES = {
    "torchvision": "BSD-3 code; ImageNet-trained weights (ImageNet terms: non-commercial research)",
    "bcos-hub": "Apache-2.0 code; ImageNet-trained weights (ImageNet terms: non-commercial research)",
    "huggingface-aloe": "CC BY-NC-SA 4.0 (weights and code; the method is patent pending)",
}
# The bcos hub's entry points and their (base network, experiment) keys in ``bcos.models.pretrained.URLS``.
_VITS = ("ti", "s", "b", "l")
BCOS_HUB: dict[str, tuple[str, str]] = {
    "resnet18": ("bcos_final", "resnet_18"),
    "resnet50": ("bcos_final", "resnet_50"),
    **{f"simple_vit_{s}_patch16_224": ("vit_final", f"bcos_simple_vit_{s}_patch16_224") for s in _VITS},
    **{f"vitc_{s}_patch1_14": ("vit_final", f"bcos_vitc_{s}_patch1_14") for s in _VITS},
    **{f"standard_simple_vit_{s}_patch16_224": ("vit_final", f"simple_vit_{s}_patch16_224") for s in _VITS},
    **{f"standard_vitc_{s}_patch1_14": ("vit_final", f"vitc_{s}_patch1_14") for s in _VITS},
}
# ALOE's released ImageNet-1k classifiers (backbone + B-cos linear probe), Hugging Face repositories: every one the
# rmaser/ALOE README lists under "Published Models" (7 ALOE classifiers; ALOEv2, the multi-resolution DINOv3
# follow-up, publishes DINOv3 small/base/large only, no SigLIP2). The backbones without a probe are not classifiers.
ALOE_CLASSIFIERS = tuple(
    f"rmaser/aloe-{backbone}-in1k-lp"
    for backbone in (
        "dinov3-small",
        "dinov3-base",
        "dinov3-large",
        "siglip2-base",
        "siglip2-large",
        "siglip2-so400m",
        "siglip2-so400m-432",
        "v2-dinov3-small",
        "v2-dinov3-base",
        "v2-dinov3-large",
    )
)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def _torch_hub_hint(url: str) -> str:
    folder = os.path.join(torch.hub.get_dir(), "checkpoints")
    return f"offline? download {url} into {folder}/ and run again, or use an offline zoo model (see `bench list`)"


def _seeded_build(build: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


def logit_bias(module: nn.Module) -> float:
    """The constant every logit carries: the sum over the model's logit layers (bcos' or ALOE's)."""
    return sum(
        float(getattr(m, "logit_bias", 0.0) or 0.0)
        for m in module.modules()
        if isinstance(m, LogitLayer) or type(m).__name__.endswith("LogitLayer")
    )


def _random_torchvision(arch: str) -> nn.Module:
    """torchvision's initialisation, except that a ViT's head, which torchvision zero-initialises (every logit
    and every gradient map would be 0), is drawn like its other linear layers (truncated normal, std 0.02)."""
    import torchvision

    module = torchvision.models.get_model(arch, weights=None)
    head = getattr(getattr(module, "heads", None), "head", None)
    if isinstance(head, nn.Linear):
        nn.init.trunc_normal_(head.weight, std=0.02)
    return module


def torchvision_model(arch: str, *, is_vit: bool, conv_layer: str | None, pretrained: bool = True) -> Callable:
    def build(device: str | torch.device = "cpu", weights: str | None = "DEFAULT") -> ModelAdapter:
        import torchvision

        if not pretrained or weights is None:
            module = _seeded_build(lambda: _random_torchvision(arch))
            described, info = f"torchvision {arch}, randomly initialised (seed 0)", {"weights": "random, seed 0"}
        else:
            table = torchvision.models.get_model_weights(arch)
            if weights not in table.__members__:
                raise UserError(f"torchvision {arch} has no weights {weights!r}; valid: {', '.join(table.__members__)}")
            chosen = table[weights]
            try:
                module = torchvision.models.get_model(arch, weights=chosen)
            except Exception as exc:  # noqa: BLE001 - network / file errors differ by platform
                raise UserError(
                    f"could not load torchvision {arch} weights {chosen}: {_first_line(exc)}; "
                    + _torch_hub_hint(chosen.url)
                ) from exc
            described, info = f"torchvision {arch} ({chosen} weights)", {"weights": str(chosen)}
        return ModelAdapter(
            name=arch if pretrained else f"{arch}_random",
            family="standard",
            module=module,
            encoding=normalized(IMAGENET_MEAN, IMAGENET_STD),
            num_classes=1000,
            input_size=(224, 224),
            is_vit=is_vit,
            conv_layer=conv_layer,
            description=described,
            info={"source": "torchvision", "licence": LICENCES["torchvision"], **info},
        ).to(device)

    return build


def torchvision_architecture(arch: str) -> Callable[[], nn.Module]:
    """torchvision ``arch`` with seeded random weights (no download)."""
    return lambda: _seeded_build(lambda: _random_torchvision(arch))


def bcos_architecture(entry: str) -> Callable[[], nn.Module]:
    """bcos hub ``entry`` with seeded random weights (no download)."""

    def build() -> nn.Module:
        from bcos.models import pretrained as hub

        return _seeded_build(lambda: getattr(hub, entry)(pretrained=False))

    return build


def hub_encoding(entry: str) -> InputEncoding:
    """What a bcos hub entry reads: ImageNet-normalised images (the standard counterparts) or [x, 1 - x]."""
    return normalized(IMAGENET_MEAN, IMAGENET_STD) if is_standard(entry) else bcos_inverse(3)


def is_standard(entry: str) -> bool:
    """Whether a bcos hub entry is one of the package's standard (non-B-cos) counterparts."""
    return entry.startswith("standard_")


def bcos_hub_name(entry: str) -> str:
    """The registry name of a bcos hub entry: ``bcos_<entry>`` for B-cos models, the entry for standard ones."""
    return entry if is_standard(entry) else f"bcos_{entry}"


def bcos_hub_model(entry: str, *, is_vit: bool, conv_layer: str | None, random: bool = False) -> Callable:
    """An entry point of ``bcos.models.pretrained``: B-cos models, or the package's standard counterparts
    (``standard_*``: ImageNet normalisation, softmax) that TPAMI compares them with; ``random``: the architecture
    with seeded random weights, no download (``{name}_random``)."""
    standard = is_standard(entry)

    def build(device: str | torch.device = "cpu", pretrained: bool = not random) -> ModelAdapter:
        from bcos.models import pretrained as hub

        base, experiment = BCOS_HUB[entry]
        url = hub.URLS[base][experiment]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = _seeded_build(lambda: getattr(hub, entry)(pretrained=pretrained))
        except Exception as exc:  # noqa: BLE001
            raise UserError(
                f"could not load the bcos package's pretrained {entry}: {_first_line(exc)}; {_torch_hub_hint(url)}"
            ) from exc
        return ModelAdapter(
            name=bcos_hub_name(entry) + ("_random" if random else ""),
            family="standard" if standard else "bcos",
            module=module,
            encoding=normalized(IMAGENET_MEAN, IMAGENET_STD) if standard else bcos_inverse(3),
            num_classes=1000,
            input_size=(224, 224),
            is_vit=is_vit,
            activation="softmax" if standard else "sigmoid",
            logit_bias=logit_bias(module),
            conv_layer=conv_layer,
            description=f"{'standard' if standard else 'B-cos'} {entry} (bcos package weights)",
            info={
                "source": "bcos-hub",
                "weights": url if pretrained else "random, seed 0",
                "licence": LICENCES["bcos-hub"],
            },
        ).to(device)

    return build


class HuggingFaceLogits(nn.Module):
    """A Hugging Face image classifier as ``pixel_values -> logits``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(pixel_values=x).logits


def aloe_adapter(name: str, model: nn.Module, processor: object, repo: str) -> ModelAdapter:
    """Wrap a loaded ALOE classifier: the processor's mean / std, then [z, 1 - z]; sigmoid outputs; W(x)x from
    the model's own ``explain`` (its explanation mode), channel-summed contributions."""
    missing = [a for a in ("image_mean", "image_std", "size") if not getattr(processor, a, None)]
    if missing:  # guessing (ImageNet statistics, 224 px) would feed SigLIP-style models wrong inputs silently
        raise UserError(f"the image processor of {repo} has no {', '.join(missing)}; cannot encode its inputs")
    mean = tuple(float(v) for v in processor.image_mean)
    std = tuple(float(v) for v in processor.image_std)
    size = processor.size
    side = int(size.get("height") or size.get("shortest_edge")) if isinstance(size, dict) else int(size)

    def explain(inputs: Tensor, targets: Tensor) -> Tensor:
        result = model.explain(inputs, idx=targets)
        return torch.as_tensor(result["contribution_map"], device=inputs.device).detach()

    return ModelAdapter(
        name=name,
        family="aloe",
        module=HuggingFaceLogits(model),
        encoding=aloe_inverse(mean, std),
        num_classes=int(model.config.num_labels),
        input_size=(side, side),
        is_vit=True,
        activation="sigmoid",
        logit_bias=logit_bias(model),
        description=f"ALOE {repo} (Hugging Face; custom code, trust_remote_code)",
        info={"source": "huggingface", "repo": repo, "licence": LICENCES["huggingface-aloe"]},
        native_explainer=explain,
    )


def aloe_model(repo: str) -> Callable:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        from transformers import AutoImageProcessor, AutoModelForImageClassification

        try:
            processor = AutoImageProcessor.from_pretrained(repo, trust_remote_code=True, use_fast=False)
            model = AutoModelForImageClassification.from_pretrained(repo, trust_remote_code=True)
        except Exception as exc:  # noqa: BLE001
            raise UserError(
                f"could not load ALOE checkpoint {repo}: {_first_line(exc)}; offline? on a machine with internet "
                f"run `huggingface-cli download {repo}` (it lands in {hf_hub_cache()}), copy that folder here and "
                "set HF_HUB_OFFLINE=1"
            ) from exc
        return aloe_adapter(registry_name(repo), model.eval(), processor, repo).to(device)

    return build


def hf_home() -> str:
    """Hugging Face's home folder: HF_HOME, else XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")


def hf_hub_cache() -> str:
    """Where Hugging Face keeps downloads, by huggingface_hub's rules (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE,
    then HF_HOME/hub with :func:`hf_home`)."""
    return os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(hf_home(), "hub")


def registry_name(repo: str) -> str:
    """``rmaser/aloe-dinov3-base-in1k-lp`` -> ``aloe_dinov3_base_in1k_lp``."""
    return repo.split("/")[-1].replace("-", "_")
