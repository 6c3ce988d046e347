"""A hand-set token classifier whose exact attribution is known by construction: the text side of the ground-truth tier.

The network reads a sentence as the embedding-layer output (B, D, T) of a fixed, hand-set embedding table over the
WordPiece vocabulary (``[CLS] tokens [SEP]`` then padding 0, as every text model of the suite) and scores topic ``c``
as a bag of words:

    f_c(x) = sum_t g_c(x_t) + beta_c,      g_c(e) = sum_m W[c, m] relu(<d_m, e> + b_m)          (beta_c = 0)

with hand-set kernels ``d_m`` (one per channel ``m``), channel biases ``b_m <= 0`` and head weights ``W``. Each term
reads one token position, so the logit is a sum of per-token functions and ``g_c(0) = 0`` (every bias is <= 0): the
exact attribution of a token is ``g_c(x_t)`` (:mod:`faithbench.models.truth.token_exact`; ``docs/ground-truth.md``).
It is one 1-wide convolution over the tokens (``detect``), a ReLU, a sum over positions and a linear layer (``head``).

The embedding space (:data:`DIM` = 16) has four kinds of axes: a detector axis ``a_c`` and a linear axis ``l_c`` per
class, one noise axis ``n`` and seven neutral axes that no kernel reads. A word's embedding is its role's part plus a
seeded neutral part (every word has one, so no embedding is 0, the padding):

* **keywords** of class ``c`` (strength ``v`` in {0.6, 0.8, 1}): ``v a_c``, read by the thresholded detector
  ``d = a_c - 3 / (C - 1) sum_{c' != c} a_c'``, bias ``-TAU``: ``ALPHA relu(v - TAU)``;
* **linear words** of class ``c`` (``v`` in {0.2, 0.3, 0.4}): ``v l_c``, read linearly by the template pair
  ``t_c = l_c - 1 / (C - 1) sum_{c' != c} l_c'`` and ``-t_c`` (bias 0, weights ``+GAMMA`` / ``-GAMMA``:
  ``relu(z) - relu(-z) = z``);
* **near-miss words** of class ``c`` (``v`` in {0.1, 0.2}, below ``TAU``): ``v a_c``, never firing a detector;
* the **noise word** (``reportedly``): ``NOISE_LEAK l_0``, which the templates read (``GAMMA <t_c, u>``);
* the **suppressor word** (``meanwhile``): ``n``, read by the noise channel (kernel ``n``, bias 0) with weight
  ``-GAMMA <t_c, u>``, which cancels one noise word exactly;
* **fillers**, [CLS], [SEP], [MASK] and every other id of the vocabulary: the neutral part only (weight 0 for
  every class: the distractors).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

CLASSES = ("world", "sports", "business", "science")  # the topics, in label order
ALPHA = 2.0  # weight of a class's detector
GAMMA = 2.0  # weight of a class's linear template
TAU = 0.3  # detector threshold: keywords have strength >= 0.6, near-miss words <= 0.2
OFF_CLASS = 3.0  # the detectors' penalty on another class's detector axis (the templates': 1)
NOISE_LEAK = 0.1  # the noise word's component on the linear axis of class 0
N_NEUTRAL = 7
DIM = 2 * len(CLASSES) + 1 + N_NEUTRAL  # detector axes, linear axes, the noise axis, neutral axes
NOISE_AXIS = 2 * len(CLASSES)
NEUTRAL_NORM = (0.5, 1.0)  # norm of every embedding's neutral part
ROLES = ("keyword", "linear", "near_miss", "noise", "suppressor", "filler")

KEYWORDS = (  # per class: (word, strength), read by the thresholded detectors
    (("election", 1.0), ("minister", 0.8), ("embassy", 0.6)),
    (("football", 1.0), ("tennis", 0.8), ("striker", 0.6)),
    (("shares", 1.0), ("profits", 0.8), ("investors", 0.6)),
    (("physics", 1.0), ("telescope", 0.8), ("laboratory", 0.6)),
)
LINEAR_WORDS = (  # per class: read linearly by the template pair
    (("government", 0.4), ("treaty", 0.3), ("border", 0.2)),
    (("match", 0.4), ("season", 0.3), ("coach", 0.2)),
    (("market", 0.4), ("company", 0.3), ("deal", 0.2)),
    (("research", 0.4), ("computer", 0.3), ("data", 0.2)),
)
NEAR_MISS = (  # per class: on the detector axis below the threshold (zero weight, topical-looking distractors)
    (("country", 0.2), ("nation", 0.1)),
    (("team", 0.2), ("player", 0.1)),
    (("money", 0.2), ("bank", 0.1)),
    (("internet", 0.2), ("online", 0.1)),
)
NOISE_WORD, SUPPRESSOR_WORD = "reportedly", "meanwhile"
FILLERS = (
    "the", "a", "of", "and", "in", "to", "on", "new", "said", "today",
    "week", "people", "year", "after", "was", "this", "that", "with", "for", "by",
)  # fmt: skip


@dataclass(frozen=True)
class Word:
    """A word of the lexicon: its role, its class (-1: none) and its strength on its role's axis."""

    word: str
    role: str
    cls: int = -1
    strength: float = 0.0


def lexicon() -> tuple[Word, ...]:
    """Every word the data uses, with its role (fillers: the neutral part only)."""
    words = [Word(w, "keyword", c, v) for c, ws in enumerate(KEYWORDS) for w, v in ws]
    words += [Word(w, "linear", c, v) for c, ws in enumerate(LINEAR_WORDS) for w, v in ws]
    words += [Word(w, "near_miss", c, v) for c, ws in enumerate(NEAR_MISS) for w, v in ws]
    words += [Word(NOISE_WORD, "noise", 0, NOISE_LEAK), Word(SUPPRESSOR_WORD, "suppressor", -1, 1.0)]
    return tuple(words + [Word(w, "filler") for w in FILLERS])


def _role_vector(word: Word) -> Tensor:
    """The role's part of a word's embedding: ``v a_c`` (keywords, near misses), ``v l_c`` (linear words, the noise
    word), ``n`` (the suppressor), 0 (fillers)."""
    e = torch.zeros(DIM, dtype=torch.float64)
    if word.role in ("keyword", "near_miss"):
        e[word.cls] = word.strength
    elif word.role in ("linear", "noise"):
        e[len(CLASSES) + word.cls] = word.strength
    elif word.role == "suppressor":
        e[NOISE_AXIS] = word.strength
    return e


def embedding_table(vocab_size: int, ids: dict[str, int], pad: int, seed: int = 0) -> Tensor:
    """(vocab_size, DIM) float32: every id a seeded neutral part of norm in ``NEUTRAL_NORM`` (the distractors), the
    lexicon's words (``ids``: word -> id) their role's part on top; the padding id 0."""
    gen = torch.Generator().manual_seed(seed)
    neutral = torch.randn(vocab_size, N_NEUTRAL, generator=gen, dtype=torch.float64)
    low, high = NEUTRAL_NORM
    norm = low + (high - low) * torch.rand(vocab_size, 1, generator=gen, dtype=torch.float64)
    table = torch.zeros(vocab_size, DIM, dtype=torch.float64)
    table[:, DIM - N_NEUTRAL :] = neutral / neutral.norm(dim=1, keepdim=True) * norm
    for word in lexicon():
        table[ids[word.word]] += _role_vector(word)
    table[pad] = 0.0
    return table.float()


def kernels() -> tuple[Tensor, Tensor]:
    """(M, DIM) kernels and (M,) biases: 4 detectors, 4 templates, 4 negated templates, the noise channel."""
    c = len(CLASSES)
    eye = torch.eye(c)
    detectors = torch.zeros(c, DIM)
    detectors[:, :c] = eye - OFF_CLASS / (c - 1) * (1 - eye)
    templates = torch.zeros(c, DIM)
    templates[:, c : 2 * c] = eye - (1 - eye) / (c - 1)
    noise = torch.zeros(1, DIM)
    noise[0, NOISE_AXIS] = 1.0
    weights = torch.cat([detectors, templates, -templates, noise])
    biases = torch.cat([torch.full((c,), -TAU), torch.zeros(2 * c + 1)])
    return weights, biases


def head_weights(*, suppressor: bool = True) -> Tensor:
    """(C, M): class ``c`` weighs its detector ``ALPHA``, its template pair ``+-GAMMA`` and the noise channel
    ``-GAMMA <t_c, u>`` (``suppressor=False``: 0, the ablation)."""
    weights, _ = kernels()
    c, channels = len(CLASSES), len(weights)
    u = _role_vector(Word(NOISE_WORD, "noise", 0, NOISE_LEAK)).float()
    w = torch.zeros(c, channels)
    for k in range(c):
        w[k, k] = ALPHA
        w[k, c + k], w[k, 2 * c + k] = GAMMA, -GAMMA
        if suppressor:
            w[k, channels - 1] = -GAMMA * (weights[c + k] @ u)  # the suppressor's n-component is 1
    return w


class TokenAdditiveNet(nn.Module):
    """``f_c(x) = sum_t sum_m W[c, m] relu(<d_m, x_t> + b_m) + beta_c`` on (B, DIM, T) embeddings.

    ``detect`` (a 1-wide convolution over the tokens, then a ReLU) gives every channel's response at every position;
    ``head`` (a linear layer on the responses summed over the positions) weighs them per class. ``embeddings`` (a
    buffer: part of the checkpoint, never randomised) is the table the adapter's encoding looks the ids up in.
    """

    def __init__(self, table: Tensor, kernels: Tensor, biases: Tensor, head: Tensor, class_bias: Tensor) -> None:
        super().__init__()
        channels, classes = kernels.shape[0], head.shape[0]
        if table.shape[1] != kernels.shape[1] or head.shape != (classes, channels) or class_bias.shape != (classes,):
            raise ValueError(
                f"table (V, D), kernels (M, D), head (C, M) and class_bias (C,) must agree; got {tuple(table.shape)}, "
                f"{tuple(kernels.shape)}, {tuple(head.shape)}, {tuple(class_bias.shape)}"
            )
        self.register_buffer("embeddings", table)
        self.detect = nn.Sequential(nn.Conv1d(kernels.shape[1], channels, 1), nn.ReLU())
        self.head = nn.Linear(channels, classes)
        with torch.no_grad():
            self.detect[0].weight.copy_(kernels.unsqueeze(2))
            self.detect[0].bias.copy_(biases)
            self.head.weight.copy_(head)
            self.head.bias.copy_(class_bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"a text model takes (B, D, T) embeddings, got shape {tuple(x.shape)}")
        return self.head(self.detect(x).sum(dim=2))


def token_additive_net(ids: dict[str, int], vocab_size: int, pad: int, *, suppressor: bool = True) -> TokenAdditiveNet:
    """The hand-set bag-of-words network over a vocabulary of ``vocab_size`` ids (``ids``: the lexicon's word -> id),
    in eval mode (4 classes; no class bias)."""
    weights, biases = kernels()
    table = embedding_table(vocab_size, ids, pad)
    head = head_weights(suppressor=suppressor)
    return TokenAdditiveNet(table, weights, biases, head, torch.zeros(len(CLASSES))).eval()
