"""BERT-family checkpoints from Hugging Face as :class:`~faithbench.models.nets.text_transformer.TextTransformer` s.

``bert-base-uncased``, ``distilbert-base-uncased`` and ``roberta-base`` are read with ``transformers`` from the
local Hugging Face cache (absent and offline: one line naming the checkpoint and how to get it, see
:func:`faithbench.models.data.hf.require`) and their weights copied into the plain-torch
``TextTransformer``, so every text
method and the B-cos LM conversion apply to them unchanged. All three are BERT's post-LayerNorm blocks with erf
GELU; they differ in:

- DistilBERT: 6 blocks, no token types, no pooler. Its classification head (``pre_classifier`` + ReLU on the
  first token) is our pooler with a ReLU, new (seeded) like the classifier.
- RoBERTa: positions numbered from ``pad_token_id + 1`` (= 2), one token type, LayerNorm eps 1e-5 and its own BPE
  vocabulary (``<s> ... </s>``, ``<pad>`` = 1): data for it is tokenized with its tokenizer. Its pooler is new
  too, as in ``RobertaForSequenceClassification`` (the checkpoint has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from faithbench.errors import UserError
from faithbench.models.checkpoints.hub import hf_hub_cache
from faithbench.models.data.hf import require
from faithbench.models.nets.text_transformer import WORDPIECE, TextTransformer, checkpoint_key, minilm_folder


@dataclass(frozen=True)
class Checkpoint:
    repo: str
    tokenizer: str  # the vocabulary its inputs are written in (WORDPIECE: MiniLM's, bert-base-uncased's)
    geometry: dict  # TextTransformer arguments from the published config (the zoo rebuilds without the HF cache)


_BASE = {"dim": 768, "heads": 12, "hidden": 3072}
CHECKPOINTS = {
    c.repo: c
    for c in (
        Checkpoint(
            "bert-base-uncased",
            WORDPIECE,
            _BASE | {"vocab_size": 30522, "depth": 12, "max_positions": 512, "type_vocab_size": 2, "eps": 1e-12},
        ),
        Checkpoint(
            "distilbert-base-uncased",
            WORDPIECE,
            _BASE
            | {"vocab_size": 30522, "depth": 6, "max_positions": 512, "type_vocab_size": 1, "eps": 1e-12}
            | {"pooler_activation": "relu"},
        ),
        Checkpoint(
            "roberta-base",
            "roberta-base",
            _BASE
            | {"vocab_size": 50265, "depth": 12, "max_positions": 514, "type_vocab_size": 1, "eps": 1e-5}
            | {"position_offset": 2},
        ),
    )
}
NEW_PARAMETERS = {  # ours that the checkpoint does not hold: initialised from the seed
    "bert": ("classifier.",),
    "roberta": ("classifier.", "pooler."),
    "distilbert": ("classifier.", "pooler.", "token_type_embeddings."),
}


def geometry(config) -> dict:
    """:class:`TextTransformer` arguments (``num_classes`` aside) from a ``transformers`` config."""
    kind = config.model_type
    if kind in ("bert", "roberta"):
        activation = config.hidden_act
        out = {
            "vocab_size": config.vocab_size,
            "dim": config.hidden_size,
            "depth": config.num_hidden_layers,
            "heads": config.num_attention_heads,
            "hidden": config.intermediate_size,
            "max_positions": config.max_position_embeddings,
            "type_vocab_size": config.type_vocab_size,
            "eps": config.layer_norm_eps,
        }
        if kind == "roberta":
            out["position_offset"] = config.pad_token_id + 1
    elif kind == "distilbert":
        activation = config.activation
        if config.sinusoidal_pos_embds:
            raise UserError("DistilBERT checkpoints with sinusoidal position embeddings are not supported")
        out = {
            "vocab_size": config.vocab_size,
            "dim": config.dim,
            "depth": config.n_layers,
            "heads": config.n_heads,
            "hidden": config.hidden_dim,
            "max_positions": config.max_position_embeddings,
            "type_vocab_size": 1,
            "eps": 1e-12,  # DistilBERT's LayerNorms are built with eps 1e-12, not from the config
            "pooler_activation": "relu",
        }
    else:
        raise UserError(f"checkpoint of model type {kind!r} is not supported; valid: bert, distilbert, roberta")
    if activation != "gelu":
        raise UserError(f"{kind} checkpoint with activation {activation!r} is not supported; valid: gelu")
    return out


def from_hf_model(hf_model: nn.Module, num_classes: int, seed: int = 0) -> TextTransformer:
    """A :class:`TextTransformer` with the weights of a ``transformers`` BertModel, DistilBertModel or RobertaModel
    and a new (seeded) classifier (and pooler, where the family's classification head does not reuse one)."""
    kind = hf_model.config.model_type
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TextTransformer(**geometry(hf_model.config), num_classes=num_classes)
    if kind == "distilbert":
        nn.init.zeros_(model.token_type_embeddings.weight)  # no token types: a zero embedding adds nothing
    layout = "distilbert" if kind == "distilbert" else "bert"
    state = hf_model.state_dict()
    own = {}
    for name, _ in model.named_parameters():
        if not name.startswith(NEW_PARAMETERS[kind]):
            key = checkpoint_key(name, layout)
            if key not in state:
                raise UserError(f"{kind} checkpoint has no weight {key!r} (for our {name})")
            own[name] = state[key]
    model.load_state_dict(own, strict=False)
    return model.eval()


def pretrained_transformer(repo: str, num_classes: int, seed: int = 0) -> TextTransformer:
    """Checkpoint ``repo`` (a key of :data:`CHECKPOINTS`) from the local Hugging Face cache: :func:`from_hf_model`."""
    if repo not in CHECKPOINTS:
        raise UserError(f"unknown checkpoint {repo!r}; valid: {', '.join(CHECKPOINTS)}")
    require(repo, "model", "checkpoint")
    from transformers import AutoModel

    hf_model = AutoModel.from_pretrained(repo, cache_dir=hf_hub_cache(), local_files_only=True)
    if CHECKPOINTS[repo].tokenizer == WORDPIECE:  # its data are MiniLM's ids: the vocabularies must be one
        if load_tokenizer(WORDPIECE).get_vocab() != load_tokenizer_file(tokenizer_file(repo)).get_vocab():
            raise UserError(f"checkpoint {repo!r} has a vocabulary other than MiniLM's WordPiece ({WORDPIECE})")
    expected = CHECKPOINTS[repo].geometry
    found = {k: v for k, v in geometry(hf_model.config).items() if k in expected}
    if found != expected:
        raise UserError(f"checkpoint {repo!r} in the cache has geometry {found}, not the published {expected}")
    return from_hf_model(hf_model, num_classes, seed)


def load_tokenizer_file(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def tokenizer_file(name: str) -> Path:
    """``tokenizer.json`` of checkpoint ``name``, from the local Hugging Face cache, or of a local folder."""
    from huggingface_hub import hf_hub_download

    if (Path(name) / "tokenizer.json").is_file():  # a local folder's (a model of faithbench.wrap_text_model)
        return Path(name) / "tokenizer.json"
    if name not in CHECKPOINTS:
        raise UserError(
            f"unknown tokenizer {name!r}; valid: {WORDPIECE}, {', '.join(CHECKPOINTS)} or a folder with tokenizer.json"
        )
    require(name, "model", "tokenizer of")
    return Path(hf_hub_download(name, "tokenizer.json", local_files_only=True, cache_dir=hf_hub_cache()))


def load_tokenizer(name: str = WORDPIECE, max_length: int = 512):
    """Tokenizer ``name`` (``tokenizers``): :data:`WORDPIECE` (MiniLM's) or a checkpoint's of
    :data:`CHECKPOINTS`; without padding (sequences keep their own lengths) and
    truncated to
    ``max_length`` tokens ([CLS] and [SEP] included): the position embeddings end at 512."""
    from tokenizers import Tokenizer

    if name == WORDPIECE:
        path = minilm_folder() / "tokenizer.json"
    else:
        path = tokenizer_file(name)
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer
