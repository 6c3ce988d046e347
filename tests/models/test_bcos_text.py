"""The B-cos LM conversion: weights, no biases, B, and complete per-token W(x)x at the embedding layer."""

import pytest
import torch
from bcos.common import explanation_mode
from bcos.modules import BcosLinear

from faithbench.models.checkpoints.hf_bert import load_tokenizer
from faithbench.models.nets.bcos_text import bcos_text_transformer
from faithbench.models.nets.text_transformer import TextTransformer, minilm_classifier


def small(seed: int = 0) -> TextTransformer:
    torch.manual_seed(seed)
    return TextTransformer(vocab_size=50, dim=16, depth=2, heads=2, hidden=32, max_positions=20, num_classes=3).eval()


def token_contributions(model, ids, mask, target):
    e = model.embed(ids).detach().requires_grad_(True)
    with explanation_mode(model):
        logits = model.from_embeddings(e, mask)
        (grad,) = torch.autograd.grad(logits[:, target].sum(), e)
    return (e * grad).sum(-1).detach(), logits.detach()


def test_conversion_drops_every_bias_and_keeps_the_weights():
    model = small()
    bcos = bcos_text_transformer(model, b=1.5)
    assert not [n for n, _ in bcos.named_parameters() if n.endswith("bias")]
    layers = [m for m in bcos.modules() if isinstance(m, BcosLinear)]
    assert len(layers) == 2 * 3 + 2 and all(m.b == 1.5 for m in layers)  # attn out, FFN x2 per block; pooler, head
    torch.testing.assert_close(bcos.blocks[1].intermediate.linear.weight, model.blocks[1].intermediate.weight)
    torch.testing.assert_close(bcos.blocks[0].attention.query.weight, model.blocks[0].attention.query.weight)
    assert bcos.blocks[0].attention.query.bias is None and type(bcos.pooler_act).__name__ == "Identity"
    assert model.blocks[0].intermediate.bias is not None  # the original is untouched


@pytest.mark.parametrize("b", [1.0, 1.25, 1.5, 2.0, 2.5])
def test_token_contributions_sum_to_the_logit(b):
    bcos = bcos_text_transformer(small(), b=b)
    ids = torch.randint(1, 50, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0  # padding: its embeddings get no contribution through the masked attention
    contributions, logits = token_contributions(bcos, ids, mask, target=2)
    torch.testing.assert_close(contributions.sum(1), logits[:, 2], rtol=1e-4, atol=1e-5)
    assert contributions[2, 6:].abs().max() < 1e-6 * contributions.abs().max() + 1e-7


def test_the_minilm_b_cos_lm_is_complete_on_real_text():
    bcos = bcos_text_transformer(minilm_classifier(depth=3), b=1.5)
    ids = torch.tensor([load_tokenizer().encode("A gripping, beautifully acted film about grief.").ids])
    contributions, logits = token_contributions(bcos, ids, torch.ones_like(ids), target=1)
    torch.testing.assert_close(contributions.sum(1), logits[:, 1], rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(bcos(ids), logits)  # explanation mode changes gradients only


def test_conversion_keeps_the_models_dtype():
    bcos = bcos_text_transformer(small().double())
    assert {p.dtype for p in bcos.parameters()} == {torch.float64}
    ids = torch.randint(1, 50, (2, 5))
    assert bcos(ids).dtype == torch.float64
