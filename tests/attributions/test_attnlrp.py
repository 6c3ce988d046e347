"""AttnLRP (lxt): conservation on random and trained ViTs, batch invariance, refusal before compute, and that
lxt's process-wide patches are undone after each call."""

import pytest
import torch
import zennit.core
from bcos.common import explanation_mode
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.attributions.attnlrp import gamma_composite, lxt_rules
from faithbench.attributions.native import split_input_normalization
from faithbench.models import load_model
from faithbench.models.adapter import ModelAdapter
from faithbench.models.data.mnist import mnist_splits
from faithbench.models.encoding import normalized
from faithbench.models.nets.architectures import digit_vit

GAMMAS = [(0.0, 0.0), (0.25, 0.05), (100.0, 1.0)]


def torchvision_vit(bias: bool = True) -> ModelAdapter:
    torch.manual_seed(0)
    net = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
    net.heads = nn.Linear(32, 5)
    with torch.no_grad():
        net.class_token.normal_()
        for name, p in net.named_parameters():
            p.copy_(torch.zeros_like(p) if name.endswith("bias") and not bias else p + 0.02 * torch.randn_like(p))
    return ModelAdapter("tv_vit", "standard", net.eval(), normalized((0.5,) * 3, (0.25,) * 3), 5, (32, 32), is_vit=True)


def _value_part(p: torch.Tensor) -> torch.Tensor:
    """1 where a bias absorbs relevance. The query / key thirds of nn.MultiheadAttention's ``in_proj_bias`` get a
    gradient through the softmax (lxt's CP patch detaches the attention's inputs, not these parameters), but CP-LRP
    sends no relevance there: count only the value third."""
    mask = torch.ones_like(p)
    if getattr(p, "_in_proj", False):
        mask[: 2 * len(p) // 3] = 0
    return mask


def relevance_with_constants(model: ModelAdapter, x, targets, gammas, leaves=()):
    """AttnLRP by hand, also returning the relevance of the encoder's token input ([CLS] + patches), of the
    positional embedding (per sample: it is added to the tokens, so it sees their gradient) and of ``leaves``."""
    net, store = model.module, {}
    hook = net.encoder.register_forward_pre_hook(lambda _m, args: store.__setitem__("tokens", args[0]))
    composite = gamma_composite(*gammas)
    x = x.clone().requires_grad_(True)
    with lxt_rules():
        composite.register(net)
        try:
            logits = net(x)
            grads = torch.autograd.grad(logits.gather(1, targets.view(-1, 1)).sum(), [x, store["tokens"], *leaves])
        finally:
            composite.remove()
            hook.remove()
    tokens = store["tokens"]
    r_cls = (tokens * grads[1])[:, 0].sum(-1)
    r_pos = (net.encoder.pos_embedding * grads[1]).sum((1, 2))
    leaf_share = sum((p * g * _value_part(p)).sum() for p, g in zip(leaves, grads[2:], strict=True))
    return logits.gather(1, targets.view(-1, 1)).squeeze(1).detach(), r_cls, r_pos, leaf_share


def simplevit_relevance(net, z, targets, gammas, leaves=()):
    """AttnLRP by hand on a model holding a bcos SimpleViT (in explanation mode): logits, the positional
    embedding's relevance per sample (it is added to the patch tokens, so it sees their gradient) and the
    gradients of ``leaves``."""
    vit = next(m for m in net.modules() if type(m).__name__ == "SimpleViT")
    store = {}
    hooks = [
        vit.transformer.register_forward_pre_hook(lambda _m, a: store.__setitem__("tokens", a[0])),
        vit.positional_embedding.register_forward_hook(lambda _m, _a, out: store.__setitem__("pe", out)),
    ]
    composite = gamma_composite(*gammas)
    with lxt_rules(), explanation_mode(net):
        composite.register(net)
        try:
            logits = net(z)
            g, *leaf_grads = torch.autograd.grad(
                logits.gather(1, targets.view(-1, 1)).sum(), [store["tokens"], *leaves]
            )
        finally:
            composite.remove()
            for hook in hooks:
                hook.remove()
    return logits.detach(), (store["pe"] * g).sum((1, 2)).detach(), leaf_grads


@pytest.mark.parametrize("gammas", GAMMAS)
def test_bias_free_torchvision_vit_conserves_pixels_plus_cls_token_plus_positional_embedding(gammas):
    model = torchvision_vit(bias=False)
    x, targets = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 2, 4])
    maps = get_method("attnlrp", conv_gamma=gammas[0], linear_gamma=gammas[1]).attribute(model, x, targets)
    logit, r_cls, r_pos, _ = relevance_with_constants(model, x, targets, gammas)
    torch.testing.assert_close(maps.sum((1, 2)) + r_cls + r_pos, logit, rtol=1e-4, atol=1e-5)
    assert (maps.sum((1, 2)) / logit).abs().max() < 0.9  # the constants do carry relevance: not trivially equal


def test_with_biases_the_missing_relevance_is_what_the_biases_absorb_at_gamma_zero():
    model = torchvision_vit(bias=True)
    biases = [p for n, p in model.module.named_parameters() if n.endswith("bias")]
    for n, p in model.module.named_parameters():
        p._in_proj = n.endswith("in_proj_bias")
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    maps = get_method("attnlrp", conv_gamma=0.0, linear_gamma=0.0).attribute(model, x, torch.tensor([1, 3]))
    for i, target in enumerate((1, 3)):  # biases are shared by the batch: one sample at a time
        logit, r_cls, r_pos, r_bias = relevance_with_constants(
            model, x[i : i + 1], torch.tensor([target]), (0, 0), biases
        )
        total = maps[i].sum() + r_cls[0] + r_pos[0] + r_bias
        torch.testing.assert_close(total, logit[0], rtol=1e-4, atol=1e-5)
        assert abs(float(r_bias.detach())) > 1e-3  # the biases' share is real, so the check can fail


def test_batch_invariant_and_class_specific():
    model = torchvision_vit()
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    method = get_method("attnlrp")
    maps = method.attribute(model, x, torch.tensor([0, 1, 2, 3]))
    one_by_one = torch.cat([method.attribute(model, x[i : i + 1], torch.tensor([i])) for i in range(4)])
    torch.testing.assert_close(maps, one_by_one, rtol=1e-4, atol=1e-6)
    other = method.attribute(model, x, torch.tensor([4, 4, 4, 4]))
    assert not torch.allclose(maps, other)


def _assert_stock_classes():
    for cls in (nn.LayerNorm, nn.GELU, nn.MultiheadAttention):
        assert cls.__dict__["forward"].__module__.startswith("torch.nn.modules."), cls
        assert "original_forward" not in cls.__dict__, cls
    for name in ("forward", "backward"):
        assert getattr(zennit.core.BasicHook, name).__module__ == "zennit.core", name


def test_lxt_patches_are_undone_after_each_call_and_after_an_error():
    _assert_stock_classes()
    get_method("attnlrp").attribute(torchvision_vit(), torch.randn(1, 3, 32, 32), torch.tensor([0]))
    _assert_stock_classes()
    with pytest.raises(RuntimeError, match="inside"), lxt_rules():
        assert nn.GELU.__dict__["forward"].__module__.startswith("lxt")  # patched while inside
        raise RuntimeError("inside")
    _assert_stock_classes()
    x = torch.randn(2, 3)
    torch.testing.assert_close(nn.LayerNorm(3)(x), nn.functional.layer_norm(x, (3,)))


def test_cnns_and_vits_without_readable_attention_are_refused_before_any_compute():
    calls = []

    class Counting(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x.flatten(1)[:, :10]

    encoding = normalized((0.5,), (0.5,))
    for is_vit in (False, True):
        model = ModelAdapter("m", "standard", Counting(), encoding, 10, (28, 28), is_vit=is_vit)
        with pytest.raises(UnsupportedMethodError, match="attnlrp"):
            get_method("attnlrp").attribute(model, torch.rand(1, 1, 28, 28), torch.tensor([0]))
    assert not calls


# Trained zoo ViTs. The B-cos ones are bias-free (their LogitLayer's constant excepted), so relevance is
# conserved exactly once the positional embedding's share is counted; B-cosified / ALOE models normalise
# their input in layer 0, whose constant offset is not a pixel: conservation holds at the normalised input.
@pytest.mark.parametrize("model_name", ["bcos_vit_mnist", "bcosified_vit_mnist", "aloe_vit_mnist"])
@pytest.mark.parametrize("gammas", GAMMAS[:2])
def test_trained_bias_free_zoo_vits_conserve_relevance(model_name, gammas):
    model = load_model(model_name)
    images = mnist_splits()[1].images[:4]
    x = model.encode(images)
    with torch.no_grad():
        targets = model.module(x).argmax(1)
    parts = split_input_normalization(model.module)
    net, z = (parts[1], parts[0](x)) if parts else (model.module, x)
    rest = ModelAdapter(model.name, model.family, net, model.encoding, 10, (28, 28), is_vit=True)
    maps = get_method("attnlrp", conv_gamma=gammas[0], linear_gamma=gammas[1]).attribute(rest, z, targets)
    logits, r_pos, _ = simplevit_relevance(net, z, targets, gammas)
    expected = logits.gather(1, targets.view(-1, 1)).squeeze(1) - model.logit_bias
    torch.testing.assert_close(maps.sum((1, 2)) + r_pos, expected, rtol=1e-4, atol=1e-4)


def _conservation_terms(model: ModelAdapter, x, targets):
    """(logits, pixel relevance, positional embedding's relevance, biases' relevance) per sample, at gamma 0."""
    biases = [p for n, p in model.module.named_parameters() if n.endswith("bias")]
    maps = get_method("attnlrp", conv_gamma=0.0, linear_gamma=0.0).attribute(model, x, targets)
    rows = []
    for i, target in enumerate(targets.tolist()):
        logits, r_pos, gb = simplevit_relevance(model.module, x[i : i + 1], torch.tensor([target]), (0.0, 0.0), biases)
        r_bias = sum((b * g).sum() for b, g in zip(biases, gb, strict=True)).detach()
        rows.append((logits[0, target], maps[i].sum(), r_pos[0], r_bias))
    return rows


def _assert_conserved(logit, pixels, r_pos, r_bias) -> None:
    """pixels + positional embedding + biases = logit, up to what the Gamma rule's stabiliser absorbs (zennit's 1e-6
    added to every denominator): a share that depends on the weights (pre-activations near 0), measured up to 1.3e-4
    of the terms' magnitude on a vit_mnist build, the same in float64 (so not rounding). A lost term (the positional
    embedding's or the biases' share, 0.1-9 on these models) is far outside 1e-3 of it."""
    scale = sum(abs(float(t)) for t in (logit, pixels, r_pos, r_bias))
    torch.testing.assert_close(pixels + r_pos + r_bias, logit, rtol=0, atol=1e-3 * max(1.0, scale))


def test_trained_standard_vit_conserves_relevance_up_to_its_biases_and_positional_embedding():
    """Pixels + positional embedding + biases = the logit: exact for any weights, so for any trained vit_mnist (the
    biases' share is the training's business: -0.002 of the logit on one machine's build, > 0.01 on another's)."""
    model = load_model("vit_mnist")
    x = model.encode(mnist_splits()[1].images[:2])
    for logit, pixels, r_pos, r_bias in _conservation_terms(model, x, torch.tensor([3, 8])):
        _assert_conserved(logit, pixels, r_pos, r_bias)


def test_a_vit_whose_biases_carry_relevance_conserves_it_only_with_their_share():
    """vit_mnist's architecture with seeded weights, every bias seeded non-zero and the classifier's bias 1: the
    biases' share is about 1 by construction (the logit's gradient with respect to its own bias is 1), so the
    conservation above must count it; pixels + positional embedding alone miss it."""
    torch.manual_seed(0)
    vit = digit_vit()
    with torch.no_grad():
        for name, p in vit.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
        vit.linear_head.linear.bias.fill_(1.0)
    model = ModelAdapter("seeded_vit", "standard", vit.eval(), normalized((0.5,), (0.5,)), 10, (28, 28), is_vit=True)
    x = model.encode(mnist_splits()[1].images[:2])
    for logit, pixels, r_pos, r_bias in _conservation_terms(model, x, torch.tensor([3, 8])):
        _assert_conserved(logit, pixels, r_pos, r_bias)
        assert 0.5 < float(r_bias) < 1.5


def test_gamma_zero_on_a_bias_free_bcos_vit_is_the_native_explanation():
    model = load_model("bcos_vit_mnist")
    x = model.encode(mnist_splits()[1].images[:4])
    targets = torch.tensor([0, 3, 5, 9])
    lrp0 = get_method("attnlrp", conv_gamma=0.0, linear_gamma=0.0).attribute(model, x, targets)
    native = get_method("native").attribute(model, x, targets)
    torch.testing.assert_close(lrp0, native, rtol=1e-4, atol=1e-4)
    gamma = get_method("attnlrp").attribute(model, x, targets)
    assert not torch.allclose(gamma, native, rtol=1e-3, atol=1e-3)  # the Gamma rule does change the map


LXT_BROKEN = """
import sys, torch
if {broken}:
    sys.modules["lxt.efficient.models.bert"] = None  # lxt's BERT copy fails to import (as under transformers 5)
from tests.attributions.test_attnlrp import torchvision_vit
from faithbench.attributions import get_method
model = torchvision_vit(bias=False)
x = torch.rand(2, 3, 32, 32)
maps = get_method("attnlrp").attribute(model, x, torch.tensor([1, 3]))
torch.save({{"x": x, "maps": maps}}, sys.argv[1])
import importlib
try:
    importlib.import_module("lxt.efficient")
    print("lxt.efficient imports")
except ImportError:
    print("lxt.efficient fails")
"""


@pytest.mark.parametrize("broken", [False, True])
def test_attnlrp_works_when_lxts_package_initialisers_fail(tmp_path, broken):
    """Under transformers 5 lxt 2.1's ``lxt.efficient`` cannot be imported (its BERT copy needs removed names);
    AttnLRP loads the ViT recipe's modules on their own and gives the same maps, and leaves no half-made
    ``lxt.efficient`` behind (a later import of it fails or works exactly as without faithbench)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / f"maps_{broken}.pt"
    proc = subprocess.run(
        [sys.executable, "-c", LXT_BROKEN.format(broken=broken), str(out)], capture_output=True, text=True, cwd=root
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    plain = subprocess.run([sys.executable, "-c", "import lxt.efficient"], capture_output=True).returncode == 0
    works = plain and not broken  # transformers 4: lxt.efficient imports; transformers 5: it fails, as without us
    assert proc.stdout.strip() == ("lxt.efficient imports" if works else "lxt.efficient fails")
    saved = torch.load(out)
    expected = get_method("attnlrp").attribute(torchvision_vit(bias=False), saved["x"], torch.tensor([1, 3]))
    assert torch.allclose(saved["maps"], expected, atol=1e-6) and saved["maps"].abs().sum() > 0
