"""Text models as the suite sees them: token ids in, the embedding layer's output as the explained input.

A text data set is a (N, T) tensor of token ids, each row ``[CLS] tokens [SEP]`` followed by ``[PAD]``.
:class:`TokenEncoding` maps it to the embedding layer's output, channel-first (B, D, T) with padding
positions set to 0; :class:`EmbeddingClassifier` classifies that tensor, attending only to the positions
that are not all zero. So a token is a feature with D channels, as a pixel is one with C: the attribution
methods and metrics of the image suite apply unchanged (attributions summed over the D embedding
dimensions, as the B-cos LM code sums -- it averages -- x * gradient), a removed token (0, LIME / Shapley's
baseline) drops out of attention, and a token replaced by [MASK] is the embedding of [MASK] at its
position (the embedding layer works position by position).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor, nn

from faithbench.models.adapter import ModelAdapter
from faithbench.models.checkpoints.hf_bert import load_tokenizer
from faithbench.models.nets.text_transformer import WORDPIECE, TextTransformer

SPECIAL_TOKENS = (  # [CLS] [SEP] [PAD] [MASK] as WordPiece (BERT) and BPE (RoBERTa) vocabularies write them
    {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]"},
    {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "mask": "<mask>"},
)


@dataclass(frozen=True)
class Vocabulary:
    """The special token ids of a tokenizer's vocabulary, and the tokenizer's name."""

    cls: int
    sep: int
    pad: int
    mask: int
    tokenizer: str = WORDPIECE

    @classmethod
    def of(cls, tokenizer, name: str = WORDPIECE) -> Vocabulary:
        for tokens in SPECIAL_TOKENS:
            ids = {role: tokenizer.token_to_id(token) for role, token in tokens.items()}
            if None not in ids.values():
                return cls(**ids, tokenizer=name)
        raise ValueError(f"tokenizer {name!r} has neither [CLS] [SEP] [PAD] [MASK] nor <s> </s> <pad> <mask>")

    def special(self, ids: Tensor) -> Tensor:
        """(B, T) bool: [CLS], [SEP] and [PAD] positions."""
        return (ids == self.cls) | (ids == self.sep) | (ids == self.pad)


MAX_LENGTH = 128  # tokens per text ([CLS] and [SEP] included); Rotten Tomatoes sentences are shorter


def tokenize(
    texts: Sequence[str], max_length: int = MAX_LENGTH, tokenizer: str = WORDPIECE
) -> tuple[Tensor, Vocabulary]:
    """(N, T) ids, ``[CLS] tokens [SEP]`` padded with [PAD] to the longest row (each at most ``max_length``)."""
    vocab, tokenizer = vocabulary(tokenizer), load_tokenizer(tokenizer, max_length=max_length)
    rows = [e.ids for e in tokenizer.encode_batch(list(texts))]
    return pad_rows(rows, vocab.pad), vocab


@lru_cache(maxsize=8)
def vocabulary(tokenizer: str = WORDPIECE) -> Vocabulary:
    return Vocabulary.of(load_tokenizer(tokenizer), tokenizer)


def pad_rows(rows: Sequence[Sequence[int]], pad: int) -> Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


class EmbeddingClassifier(nn.Module):
    """``(B, D, T)`` embedding-layer output -> logits; all-zero positions are padding (masked out of attention).

    Trailing positions that are padding in every row of the batch are dropped before the blocks run
    (the logits do not depend on them): batches of short sentences padded to a long one cost what they need.
    """

    def __init__(self, transformer: TextTransformer) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, embedded: Tensor) -> Tensor:
        if embedded.dim() != 3:
            raise ValueError(f"a text model takes (B, D, T) embeddings, got shape {tuple(embedded.shape)}")
        present = embedded.ne(0).any(dim=1)
        used = present.any(dim=0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        x = embedded[:, :, :length].transpose(1, 2)
        return self.transformer.from_normalised(x, present[:, :length])


@dataclass(frozen=True, eq=False)
class TokenEncoding:
    """Token ids (B, T) -> embedding-layer output (B, D, T), padding positions 0 (see the module docstring)."""

    name: str
    classifier: EmbeddingClassifier
    vocab: Vocabulary

    @property
    def channels(self) -> int:
        return self.classifier.transformer.word_embeddings.embedding_dim

    @torch.no_grad()
    def __call__(self, ids: Tensor) -> Tensor:
        if ids.dim() != 2 or ids.is_floating_point():
            raise ValueError(f"encoding {self.name!r} expects token ids (B, T), got {tuple(ids.shape)} {ids.dtype}")
        t = self.classifier.transformer
        device = t.word_embeddings.weight.device
        ids = ids.to(device)
        out = t.embedding_norm(t.embed(ids))
        return out.masked_fill((ids == self.vocab.pad).unsqueeze(2), 0).transpose(1, 2).contiguous()

    def feature_mask(self, ids: Tensor) -> Tensor:
        """(B, T) bool: the tokens that are features (not [CLS], [SEP] or [PAD])."""
        return ~self.vocab.special(ids)

    def masked(self, ids: Tensor, token: str = "mask") -> Tensor:
        """``ids`` with every non-padding position replaced by [MASK] (``token="mask"``) or removed (``"pad"``)."""
        if token not in ("mask", "pad"):
            raise ValueError(f"unknown replacement token {token!r}; valid: mask, pad")
        fill = self.vocab.mask if token == "mask" else self.vocab.pad
        return ids.masked_fill(ids != self.vocab.pad, fill)

    def decode(self, inputs: Tensor) -> Tensor:
        raise TypeError("text model inputs are embeddings; they do not decode to images")


def text_adapter(
    *,
    name: str,
    family: str,
    transformer: TextTransformer,
    num_classes: int,
    activation: str,
    description: str = "",
    info: dict | None = None,
    tokenizer: str = WORDPIECE,
) -> ModelAdapter:
    """The :class:`ModelAdapter` of a :class:`TextTransformer` whose inputs are ids of ``tokenizer``."""
    classifier = EmbeddingClassifier(transformer)
    vocab = vocabulary(tokenizer)
    return ModelAdapter(
        name=name,
        family=family,
        module=classifier,
        encoding=TokenEncoding(f"{name}-embeddings", classifier, vocab),
        num_classes=num_classes,
        input_size=(transformer.max_length,),
        activation=activation,
        description=description,
        info=info or {},
        modality="text",
    )
