"""The exact attribution of the hand-set token classifier (the token side of the ground-truth tier), and its adapters.

For :class:`~faithbench.models.truth.token_nets.TokenAdditiveNet`, ``f_c(x) = sum_t g_c(x_t)`` (+ a constant) with
``g_c(e) = sum_m W[c, m] relu(<d_m, e> + b_m)`` and ``g_c(0) = 0`` (every bias is <= 0). Take the token positions as
players ([CLS] and [SEP] included) and an absent token as the zero embedding (padding: what LIME, Shapley sampling,
Integrated Gradients' baseline and comprehensiveness / sufficiency with ``pad-token`` put there). The game is
additive, so

    T_t = g_c(x_t) - g_c(0) = g_c(x_t)

is every token's marginal contribution to every coalition: its Shapley value, its Banzhaf value, its leave-one-out
effect and its Integrated Gradients / DeepLift total from the zero baseline; ``sum_t T_t = f_c(x) - f_c(0)``. With
``mask-token`` removal (the [MASK] embedding instead of 0) the truth is the same: [MASK]'s embedding is neutral (no
kernel reads it), so ``g_c(e_[MASK]) = 0 = g_c(0)``. [CLS], [SEP] and fillers have ``T_t = 0`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from faithbench.models.adapter import ModelAdapter, ModelFacts
from faithbench.models.nets.text_transformer import WORDPIECE
from faithbench.models.text_encoding import TokenEncoding, vocabulary
from faithbench.models.truth.hand_set import hand_set_specs
from faithbench.models.truth.token_data import MAX_TOKENS, lexicon_ids
from faithbench.models.truth.token_nets import CLASSES, ROLES, TokenAdditiveNet, lexicon, token_additive_net

DATASET = "truth-text"


def _net(model: ModelAdapter | TokenAdditiveNet) -> TokenAdditiveNet:
    net = model.module if isinstance(model, ModelAdapter) else model
    if not isinstance(net, TokenAdditiveNet):
        raise TypeError(f"the exact token attribution is known for a TokenAdditiveNet only, got {type(net).__name__}")
    return net


def token_truth(model: ModelAdapter | TokenAdditiveNet, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, T) float64: ``T_t = g_c(x_t) - g_c(0)``, the exact contribution of each token position to logit
    ``targets[b]`` (its Shapley value; padding 0); a row sums to ``f_t(x) - f_t(0)``."""
    net = _net(model)
    if inputs.dim() != 3 or inputs.shape[1] != net.embeddings.shape[1]:
        raise ValueError(f"inputs must be (B, {net.embeddings.shape[1]}, T) embeddings, got {tuple(inputs.shape)}")
    if targets.shape != inputs.shape[:1]:
        raise ValueError(f"targets must have shape ({inputs.shape[0]},), got {tuple(targets.shape)}")
    conv = net.detect[0]
    kernels, b = conv.weight.detach().double()[:, :, 0], conv.bias.detach().double().view(1, -1, 1)
    s = torch.einsum("md,bdt->bmt", kernels, inputs.detach().double())
    w = net.head.weight.detach().double()[targets.long().to(inputs.device)].unsqueeze(2)  # (B, M, 1)
    return (w * (F.relu(s + b) - F.relu(b))).sum(dim=1)


def token_features(inputs: Tensor) -> Tensor:
    """(B, T) bool: the word positions of (B, D, T) inputs laid out ``[CLS] words [SEP]`` + zero padding (not
    [CLS], [SEP] or padding), as :func:`~faithbench.attributions.perturbation.token_segments` reads them."""
    length = inputs.ne(0).any(dim=1).sum(dim=1, keepdim=True)
    pos = torch.arange(inputs.shape[-1], device=inputs.device).unsqueeze(0)
    return (pos >= 1) & (pos < length - 1)


def roll_features(values: Tensor, features: Tensor) -> Tensor:
    """``values`` (B, T) with each row's word positions (``features``: contiguous, from position 1) rolled by half
    their number ``n``: the value of word ``j`` moves to word ``(j + n // 2) mod n``; other positions unchanged."""
    n = features.sum(dim=1, keepdim=True)
    pos = torch.arange(values.shape[-1], device=values.device).unsqueeze(0)
    source = 1 + torch.remainder(pos - 1 - n // 2, n.clamp(min=1))
    moved = values.gather(1, torch.where(features, source, pos))
    return torch.where(features, moved, values)


def true_support(model: ModelAdapter | TokenAdditiveNet, inputs: Tensor, targets: Tensor) -> Tensor:
    """(B, T) bool: the tokens with positive truth."""
    return token_truth(model, inputs, targets) > 0


class TokenTruth:
    """A hand-set token model's exact attribution, as its adapter carries it (``ModelAdapter.truth``).

    ``truth(inputs, targets)`` is the (B, T) float64 token truth of embeddings and targets; ``cells`` is None (a
    token is the feature at which the truth is exact); ``features(inputs)`` the word positions.
    """

    cells = None

    def __init__(self, net: TokenAdditiveNet) -> None:
        self.net = net

    def __call__(self, inputs: Tensor, targets: Tensor) -> Tensor:
        return token_truth(self.net, inputs, targets)

    @staticmethod
    def features(inputs: Tensor) -> Tensor:
        return token_features(inputs)


@dataclass(frozen=True, eq=False)
class TableEncoding(TokenEncoding):
    """Token ids (B, T) -> rows of the network's embedding table, (B, D, T), padding 0 (:class:`TokenEncoding`'s
    feature mask and [MASK] / [PAD] replacement; its ``classifier`` is None: the table is ``net.embeddings``)."""

    net: TokenAdditiveNet | None = None

    @property
    def channels(self) -> int:
        return int(self.net.embeddings.shape[1])

    @torch.no_grad()
    def __call__(self, ids: Tensor) -> Tensor:
        if ids.dim() != 2 or ids.is_floating_point():
            raise ValueError(f"encoding {self.name!r} expects token ids (B, T), got {tuple(ids.shape)} {ids.dtype}")
        table = self.net.embeddings
        ids = ids.to(table.device)
        out = table[ids].masked_fill((ids == self.vocab.pad).unsqueeze(2), 0)
        return out.transpose(1, 2).contiguous()


def _adapter(name: str, description: str, suppressor: bool) -> Callable[..., ModelAdapter]:
    def build(device: str | torch.device = "cpu") -> ModelAdapter:
        vocab = vocabulary(WORDPIECE)
        ids, size = lexicon_ids(WORDPIECE)
        net = token_additive_net(ids, size, vocab.pad, suppressor=suppressor)
        roles = {role: [w.word for w in lexicon() if w.role == role] for role in ROLES}
        if not suppressor:
            roles["filler"] = [*roles["filler"], *roles.pop("suppressor")]
        adapter = ModelAdapter(
            name=name,
            family="standard",
            module=net,
            encoding=TableEncoding(f"{name}-embeddings", None, vocab, net),
            num_classes=len(CLASSES),
            input_size=(MAX_TOKENS + 2,),
            description=description,
            info={"source": "hand-set", "classes": list(CLASSES), **roles},
            modality="text",
            truth=TokenTruth(net),
        )
        return adapter.to(device)

    return build


_TOKENS = (
    "hand-set bag-of-words token classifier (4 topics; thresholded keyword detectors, linear words, a noise word "
    "and its suppressor, distractor words): its exact token attribution is known (the truth-text data set)"
)
_NO_SUPPRESSOR = "truth_tokens without its suppressor weight (the noise word is not cancelled)"
SPECS = hand_set_specs(
    _adapter,
    (("truth_tokens", _TOKENS, True), ("truth_tokens_nosup", _NO_SUPPRESSOR, False)),
    modality="text",
    dataset=DATASET,
    tokenizer=WORDPIECE,
    facts=ModelFacts(input_size=(MAX_TOKENS + 2,), num_classes=len(CLASSES), truth=True),
)
