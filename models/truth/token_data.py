"""The token ground-truth tier's data: seeded sentences whose evidence, shared noise and distractors are known words.

A sentence of class ``c`` (labels balanced, shuffled) is a bag of WordPiece words of the hand-set lexicon
(:mod:`faithbench.models.truth.token_nets`), in a random order, written ``[CLS] words [SEP]`` and padded with [PAD] to
the longest row (as the other text data sets):

* **evidence**: a non-empty subset of {keyword slot 1, keyword slot 2, linear slot}, each of the 7 subsets equally
  likely; a keyword slot holds a random keyword of class ``c`` (strength 0.6 to 1), the linear slot a random linear
  word of class ``c`` (strength 0.2 to 0.4);
* **shared noise**: ``a`` copies of the noise word and ``a`` of the suppressor word, ``a`` uniform in 0..3,
  independent of the class (the suppressor word carries no class information);
* **distractors**: 2 to 6 fillers and 0 to 2 near-miss words of random classes (topical-looking words below the
  detectors' threshold), independent of the class.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from faithbench.models.checkpoints.hf_bert import load_tokenizer
from faithbench.models.nets.text_transformer import WORDPIECE
from faithbench.models.text_encoding import pad_rows, vocabulary
from faithbench.models.truth.token_nets import (
    CLASSES,
    FILLERS,
    KEYWORDS,
    LINEAR_WORDS,
    NEAR_MISS,
    NOISE_WORD,
    SUPPRESSOR_WORD,
    lexicon,
)

NOISE_COUNT = (0, 3)  # copies of the noise word (and as many of the suppressor word)
FILLER_COUNT = (2, 6)
NEAR_MISS_COUNT = (0, 2)
EVIDENCE_SLOTS = 3  # keyword, keyword, linear word
MAX_TOKENS = EVIDENCE_SLOTS + 2 * NOISE_COUNT[1] + FILLER_COUNT[1] + NEAR_MISS_COUNT[1]  # + [CLS], [SEP]


@lru_cache(maxsize=2)
def lexicon_ids(tokenizer: str = WORDPIECE) -> tuple[dict[str, int], int]:
    """(the lexicon's word -> its id in ``tokenizer``'s vocabulary, the vocabulary's size); each word is one token."""
    vocab = load_tokenizer(tokenizer)
    ids = {w.word: vocab.token_to_id(w.word) for w in lexicon()}
    missing = sorted(w for w, i in ids.items() if i is None)
    if missing:
        raise ValueError(f"the truth lexicon's words {missing} are not single tokens of {tokenizer!r}")
    return ids, vocab.get_vocab_size()


def truth_sentences(n: int, seed: int = 0, tokenizer: str = WORDPIECE) -> tuple[Tensor, Tensor]:
    """``n`` sentences as (n, T) int64 ids ``[CLS] words [SEP]`` + [PAD] of ``tokenizer`` and their labels (n,)
    int64, from ``seed`` alone (every draw from one CPU generator, in a fixed order)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    (ids, _), vocab = lexicon_ids(tokenizer), vocabulary(tokenizer)
    gen = torch.Generator().manual_seed(seed)
    classes = len(CLASSES)
    labels = torch.arange(n)[torch.randperm(n, generator=gen)] % classes
    subset = torch.randint(1, 2**EVIDENCE_SLOTS, (n,), generator=gen)  # bit i: evidence slot i is drawn
    keyword = torch.randint(0, len(KEYWORDS[0]), (n, 2), generator=gen)
    linear = torch.randint(0, len(LINEAR_WORDS[0]), (n,), generator=gen)
    noise = torch.randint(NOISE_COUNT[0], NOISE_COUNT[1] + 1, (n,), generator=gen)
    fillers = torch.randint(FILLER_COUNT[0], FILLER_COUNT[1] + 1, (n,), generator=gen)
    filler = torch.randint(0, len(FILLERS), (n, FILLER_COUNT[1]), generator=gen)
    near = torch.randint(NEAR_MISS_COUNT[0], NEAR_MISS_COUNT[1] + 1, (n,), generator=gen)
    near_class = torch.randint(0, classes, (n, NEAR_MISS_COUNT[1]), generator=gen)
    near_word = torch.randint(0, len(NEAR_MISS[0]), (n, NEAR_MISS_COUNT[1]), generator=gen)
    rows = []
    for i in range(n):
        c, bits = int(labels[i]), int(subset[i])
        words = [KEYWORDS[c][int(keyword[i, j])][0] for j in range(2) if bits >> j & 1]
        words += [LINEAR_WORDS[c][int(linear[i])][0]] if bits >> 2 & 1 else []
        words += [NOISE_WORD, SUPPRESSOR_WORD] * int(noise[i])
        words += [FILLERS[int(k)] for k in filler[i, : int(fillers[i])]]
        words += [NEAR_MISS[int(near_class[i, j])][int(near_word[i, j])][0] for j in range(int(near[i]))]
        order = torch.randperm(len(words), generator=gen).tolist()
        rows.append([vocab.cls, *(ids[words[j]] for j in order), vocab.sep])
    return pad_rows(rows, vocab.pad), labels.long()
