"""Your own model: wrap a torch image classifier as a :class:`ModelAdapter` and register it by name, so that suites,
the runner and the command line treat it like any built-in model.

    net = torchvision.models.resnet18(num_classes=10)
    net.load_state_dict(torch.load("my_weights.pt"))
    wrap_model(net, name="my_resnet18", input_size=(224, 224), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))

A suite (or :func:`faithbench.benchmark`) then names ``"my_resnet18"``. :func:`wrap_text_model` does the same for
a BERT, DistilBERT or RoBERTa sequence classifier saved in a local folder (``save_pretrained``).
:func:`torchvision_model` and :func:`timm_model` build an architecture by name with the weights of a local file
(a state dict), or seeded random weights when none is given (to try the mechanics offline).
"""

from __future__ import annotations

import sys
from importlib.util import find_spec
from pathlib import Path

import torch
from torch import nn

from faithbench.errors import UserError
from faithbench.models.adapter import FAMILIES, ModelAdapter, ModelFacts, ModelSpec
from faithbench.models.checkpoints.hf_bert import from_hf_model
from faithbench.models.encoding import InputEncoding, normalized
from faithbench.models.registry import MODELS
from faithbench.models.text_encoding import text_adapter
from faithbench.models.user_checks import PROBE_IMAGES, LogitsSelector, SelectLogits, channels_of, check_dtype, probe

SOURCE = "user"


def wrap_model(
    module: nn.Module,
    *,
    name: str,
    input_size: tuple[int, int],
    mean: tuple[float, ...] | None = None,
    std: tuple[float, ...] | None = None,
    channels: int | None = None,
    num_classes: int | None = None,
    family: str = "standard",
    is_vit: bool = False,
    conv_layer: str | None = None,
    logits: LogitsSelector | None = None,
    description: str = "",
) -> ModelAdapter:
    """Register ``module`` (images in [0, 1], normalised by ``mean`` / ``std`` when given, -> logits) as model
    ``name`` and return its adapter. ``channels``: of the images it reads (default: one per ``mean`` value, else 3).
    ``num_classes``: read from one forward pass when None. ``conv_layer``: the dotted name of the block GradCAM
    reads (None: GradCAM cannot explain this model, and the run says so). ``logits``: for a model that returns a
    tuple, dict or output object, the index, key or attribute of its logits (or a function of the output).

    Checked here, before any run: the normalisation against the channels, float32 weights, and one forward pass on
    random images (a tensor of finite logits; rows that look like probabilities get a warning); at the start of a
    run, the channels, image size and class count against its data set. A name registered by an earlier call is
    replaced; a built-in model's name is refused."""
    _check(name, family)
    image_channels = channels_of(mean, std, channels, name)
    if conv_layer is not None and conv_layer not in dict(module.named_modules()):
        raise UserError(f"conv_layer {conv_layer!r} is not a sub-module of the model (see model.named_modules())")
    check_dtype(module, name)
    if logits is not None:
        module = SelectLogits(module, logits)
        conv_layer = f"module.{conv_layer}" if conv_layer is not None else None
    encoding = normalized(tuple(mean), tuple(std)) if mean is not None else InputEncoding("identity", image_channels)
    module = module.eval()
    device = next(module.parameters()).device
    gen = torch.Generator().manual_seed(0)  # the caller's random state untouched
    images = torch.rand(PROBE_IMAGES, image_channels, *input_size, generator=gen).to(device)
    found = probe(module, encoding(images), name, logits is not None)
    if num_classes is not None and num_classes != found:
        raise UserError(f"model {name!r}: num_classes={num_classes} but it returns {found} logits")
    adapter = ModelAdapter(
        name=name,
        family=family,
        module=module,
        encoding=encoding,
        num_classes=found,
        input_size=tuple(input_size),
        is_vit=is_vit,
        conv_layer=conv_layer,
        description=description or f"user model {type(module).__name__}",
        info={"source": SOURCE},
    )
    return _register(adapter)


def _check(name: str, family: str) -> None:
    """Before any work: a known family, and a name no built-in model holds (a user model's is replaced)."""
    if family not in FAMILIES:
        raise UserError(f"unknown model family {family!r}; valid families: {', '.join(FAMILIES)}")
    if name in MODELS and MODELS.get(name).source != SOURCE:
        raise UserError(f"model name {name!r} is taken by a built-in model; choose another name")


def _register(adapter: ModelAdapter, tokenizer: str | None = None) -> ModelAdapter:
    name = adapter.name
    if name in MODELS:
        MODELS.unregister(name)
    spec = ModelSpec(
        name=name,
        family=adapter.family,
        source=SOURCE,
        description=adapter.description,
        build=lambda device="cpu": adapter.to(device),
        modality=adapter.modality,
        dataset=None,
        tokenizer=tokenizer,
        encoding=adapter.encoding if adapter.modality == "image" else None,
        facts=ModelFacts.of(adapter),
    )
    MODELS.register(name, spec)
    return adapter


# A sequence classifier's head -> our pooler and classifier (BERT's pooler is in its base model).
HEADS = {
    "bert": {"classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"},
    "roberta": {
        "classifier.dense.weight": "pooler.weight",
        "classifier.dense.bias": "pooler.bias",
        "classifier.out_proj.weight": "classifier.weight",
        "classifier.out_proj.bias": "classifier.bias",
    },
    "distilbert": {
        "pre_classifier.weight": "pooler.weight",
        "pre_classifier.bias": "pooler.bias",
        "classifier.weight": "classifier.weight",
        "classifier.bias": "classifier.bias",
    },
}


def wrap_text_model(folder: str | Path, *, name: str, family: str = "standard", description: str = "") -> ModelAdapter:
    """Register the BERT, DistilBERT or RoBERTa sequence classifier in ``folder`` (``save_pretrained``: config,
    weights and ``tokenizer.json``) as text model ``name``; its data are tokenized with the folder's tokenizer.
    The weights are copied into faithbench's plain-torch transformer, so every text method applies."""
    _check(name, family)
    folder = Path(folder).resolve()  # the tokenizer's name: the same folder from any working directory
    for needed in ("config.json", "tokenizer.json"):
        if not (folder / needed).is_file():
            raise UserError(f"{folder} has no {needed} (a model folder written by save_pretrained, with its tokenizer)")
    from transformers import AutoModelForSequenceClassification

    hf = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True)
    kind = hf.config.model_type
    if kind not in HEADS:
        raise UserError(f"{folder}: model type {kind!r} is not supported; valid: {', '.join(HEADS)}")
    transformer = from_hf_model(hf.base_model, hf.config.num_labels)
    state = hf.state_dict()
    transformer.load_state_dict({ours: state[theirs] for theirs, ours in HEADS[kind].items()}, strict=False)
    info = {"source": SOURCE, "folder": str(folder)}
    text = description or f"user text model {kind} from {folder}"
    adapter = text_adapter(
        name=name, family=family, transformer=transformer.eval(), num_classes=hf.config.num_labels,
        activation="softmax", description=text, info=info, tokenizer=str(folder),
    )  # fmt: skip
    return _register(adapter, tokenizer=str(folder))


def _weights(module: nn.Module, weights: str | Path | None) -> nn.Module:
    if weights is None:
        return module  # built under the caller's seed: seeded random weights
    path = _beside_caller(Path(weights))
    if not path.is_file():
        raise UserError(f"weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or foreign file: one line that names it
        raise UserError(f"cannot read weights file {path} ({type(exc).__name__}: {exc})") from None
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise UserError(f"weights file {path} does not fit the architecture: {first}") from None
    return module


def _beside_caller(path: Path) -> Path:
    """A relative path as the code that named it means it: beside that code's file (a plugin beside its suite) when
    the file is there, else in the working directory."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    caller = frame.f_globals.get("__file__") if frame is not None else None
    if path.is_absolute() or caller is None or not (Path(caller).parent / path).is_file():
        return path
    return Path(caller).parent / path


def torchvision_model(
    arch: str, *, num_classes: int, weights: str | Path | None = None, seed: int = 0, **kwargs
) -> nn.Module:
    """``torchvision.models.<arch>(num_classes=...)`` with the state dict in ``weights`` (None: random, ``seed``)."""
    import torchvision

    if arch not in torchvision.models.list_models(module=torchvision.models):
        valid = ", ".join(torchvision.models.list_models(module=torchvision.models)[:8])
        raise UserError(
            f"unknown torchvision architecture {arch!r}; e.g. {valid}, ... (torchvision.models.list_models())"
        )
    with torch.random.fork_rng():  # seeded weights without reseeding the caller's generator
        torch.manual_seed(seed)
        net = torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)
    return _weights(net, weights)


def timm_model(arch: str, *, num_classes: int, weights: str | Path | None = None, seed: int = 0, **kwargs) -> nn.Module:
    """``timm.create_model(arch, num_classes=...)`` with the state dict in ``weights`` (None: random, ``seed``).
    Needs timm (``pip install timm``)."""
    if find_spec("timm") is None:
        raise UserError("timm models need timm: pip install timm (or the extra: pip install -e '.[timm]')")
    import timm

    if not timm.list_models(arch):
        raise UserError(f"unknown timm architecture {arch!r} (see timm.list_models())")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = timm.create_model(arch, pretrained=False, num_classes=num_classes, **kwargs)
    return _weights(net, weights)
