"""Hand-built text models with known answers, behind the same adapter as the zoo's text models."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from faithbench.models.adapter import ModelAdapter
from faithbench.models.text_encoding import TokenEncoding, Vocabulary

VOCAB = Vocabulary(cls=1, sep=2, pad=0, mask=3)
CLASS0, CLASS1 = 10, 20  # words 10..19 vote for class 0, words 20..29 for class 1


class BagOfWords(nn.Module):
    """logits = sum over positions of the 2-d token embeddings: embedding[c] is the token's vote for class c."""

    def forward(self, embedded: Tensor) -> Tensor:
        return embedded.sum(dim=2)


@dataclass(frozen=True, eq=False)
class BagOfWordsEncoding(TokenEncoding):
    """Class-0 words -> (1, 0), class-1 words -> (0, 1), [MASK] -> ``mask_vote``, [CLS] / [SEP] -> a tiny
    (1e-3, 1e-3) (non-zero, so they are not padding), [PAD] -> 0."""

    mask_vote: tuple[float, float] = (0.0, 3.0)

    @property
    def channels(self) -> int:
        return 2

    def __call__(self, ids: Tensor) -> Tensor:
        table = torch.zeros(30, 2)
        table[CLASS0 : CLASS0 + 10, 0] = 1.0
        table[CLASS1 : CLASS1 + 10, 1] = 1.0
        table[VOCAB.mask] = torch.tensor(self.mask_vote)
        table[VOCAB.cls] = table[VOCAB.sep] = 1e-3
        return table[ids].transpose(1, 2).contiguous()


def bag_of_words(family: str = "bcos", mask_vote: tuple[float, float] = (0.0, 3.0)) -> ModelAdapter:
    """A linear text model: W(x)x = input x gradient = the token embeddings, exactly."""
    return ModelAdapter(
        name="bag_of_words",
        family=family,
        module=BagOfWords(),
        encoding=BagOfWordsEncoding("bag-of-words", None, VOCAB, mask_vote),
        num_classes=2,
        input_size=(64,),
        modality="text",
    )


def sentence(*words: int, length: int | None = None) -> list[int]:
    """[CLS] words [SEP], padded with [PAD] to ``length``."""
    row = [VOCAB.cls, *words, VOCAB.sep]
    return row + [VOCAB.pad] * ((length or len(row)) - len(row))


def small_text_model(family: str = "bcos", seed: int = 0, b: float = 1.5) -> ModelAdapter:
    """A random 2-block TextTransformer (vocabulary of 50 with ``VOCAB``'s special ids) as a text adapter."""
    from faithbench.models.nets.bcos_text import bcos_text_transformer
    from faithbench.models.nets.text_transformer import TextTransformer
    from faithbench.models.text_encoding import EmbeddingClassifier

    torch.manual_seed(seed)
    transformer = TextTransformer(vocab_size=50, dim=16, depth=2, heads=2, hidden=32, max_positions=40, num_classes=3)
    if family == "bcos":
        transformer = bcos_text_transformer(transformer, b)
    classifier = EmbeddingClassifier(transformer)
    return ModelAdapter(
        name=f"small_{family}_text",
        family=family,
        module=classifier,
        encoding=TokenEncoding("small-text", classifier, VOCAB),
        num_classes=3,
        input_size=(40,),
        activation="sigmoid" if family == "bcos" else "softmax",
        modality="text",
    )


def random_rows(n: int, seed: int = 0, vocab: int = 50) -> Tensor:
    """``n`` sentences of 3..12 random words (ids 4..vocab-1), as padded [CLS] words [SEP] rows."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 13, (n,), generator=gen).tolist()
    rows = [sentence(*torch.randint(4, vocab, (k,), generator=gen).tolist(), length=14) for k in lengths]
    return torch.tensor(rows)
