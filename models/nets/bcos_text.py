"""The B-cos LM conversion of :class:`~faithbench.models.nets.text_transformer.TextTransformer` (the B-cos LM seed,
issue 14).

As the seed's ``load_from_pretrained``: every bias is dropped (attention, feed-forward, LayerNorm, pooler,
classifier); the attention output, feed-forward, pooler and classifier become B-cos linear layers (the ``bcos``
package's, unit-norm weights, default B = 1.5) initialised from the conventional weights; q / k / v stay plain
linear maps without bias; GELU becomes a gate x * Phi(x); the pooler's tanh is removed. In explanation mode
every dynamic factor is detached (the B-cos scales, the GELU gates, the LayerNorm standard deviations and the
attention probabilities), so the model is the linear map W(x) of its summed input embeddings and the per-token
contributions e_t . dlogit/de_t sum to the logit exactly.
"""

from __future__ import annotations

import copy

from bcos.modules import BcosLinear
from bcos.modules.common import DetachableModule
from bcos.modules.norms import DetachableLayerNorm
from torch import Tensor, nn

from faithbench.models.bcosify import DetachableGELU
from faithbench.models.nets.text_transformer import TextTransformer


class DetachableSoftmax(DetachableModule):
    """Softmax whose output (the attention probabilities) is a constant in explanation mode."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        p = x.softmax(dim=self.dim)
        return p.detach() if self.detach else p


def _bcos_linear(linear: nn.Linear, b: float) -> BcosLinear:
    new = BcosLinear(linear.in_features, linear.out_features, bias=False, b=b).to(linear.weight)
    new.linear.weight.data.copy_(linear.weight.data)
    return new


def _no_bias_linear(linear: nn.Linear) -> nn.Linear:
    new = nn.Linear(linear.in_features, linear.out_features, bias=False).to(linear.weight)
    new.weight.data.copy_(linear.weight.data)
    return new


def _no_bias_ln(ln: nn.LayerNorm) -> DetachableLayerNorm:
    new = DetachableLayerNorm(ln.normalized_shape, eps=ln.eps, bias=False).to(ln.weight)
    new.weight.data.copy_(ln.weight.data)
    return new


def bcos_text_transformer(model: TextTransformer, b: float = 1.5) -> TextTransformer:
    """A B-cos copy of ``model`` (the original is untouched)."""
    bcos = copy.deepcopy(model)
    bcos.embedding_norm = _no_bias_ln(bcos.embedding_norm)
    for block in bcos.blocks:
        att = block.attention
        att.query, att.key, att.value = (_no_bias_linear(m) for m in (att.query, att.key, att.value))
        att.attend = DetachableSoftmax(dim=-1)
        block.attention_out = _bcos_linear(block.attention_out, b)
        block.intermediate = _bcos_linear(block.intermediate, b)
        block.output = _bcos_linear(block.output, b)
        block.attention_norm = _no_bias_ln(block.attention_norm)
        block.output_norm = _no_bias_ln(block.output_norm)
        block.act = DetachableGELU(getattr(block.act, "approximate", "none"))
    bcos.pooler = _bcos_linear(bcos.pooler, b)
    bcos.pooler_act = nn.Identity()
    bcos.classifier = _bcos_linear(bcos.classifier, b)
    return bcos.eval().to(next(model.parameters()))  # the gates, softmax and identity hold no tensors
