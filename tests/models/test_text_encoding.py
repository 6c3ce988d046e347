"""Text models behind the model adapter: embeddings as the explained input, padding, special tokens, methods."""

import pytest
import torch

from faithbench.attributions import UnsupportedMethodError, get_method
from faithbench.attributions.perturbation import token_segments
from tests.text_helpers import VOCAB, random_rows, small_text_model

TEXT_METHODS = [
    "native",
    "input_x_gradient",
    "integrated_gradients",
    "gradient",
    "lime",
    "shapley_sampling",
    "attention_last",
    "attention_rollout",
]


def test_padding_changes_nothing():
    model = small_text_model("standard")
    rows = random_rows(4)
    wider = torch.cat([rows, torch.full((4, 9), VOCAB.pad)], dim=1)
    torch.testing.assert_close(model.module(model.encode(rows)), model.module(model.encode(wider)))
    x = model.encode(wider)
    assert x.shape == (4, 16, wider.shape[1]) and bool((x[:, :, -9:] == 0).all())  # padding is 0


@pytest.mark.parametrize("b", [1.0, 1.5, 2.5])
def test_native_token_contributions_sum_to_the_logit(b):
    model = small_text_model("bcos", b=b)
    rows = random_rows(6, seed=1)
    x, targets = model.encode(rows), torch.tensor([0, 1, 2, 0, 1, 2])
    maps = get_method("native").attribute(model, x, targets)
    logits = model.module(x).gather(1, targets.view(-1, 1)).squeeze(1)
    assert maps.shape == rows.shape
    torch.testing.assert_close(maps.sum(dim=1), logits.detach(), atol=1e-5, rtol=1e-4)
    assert bool((maps[rows == VOCAB.pad] == 0).all())


def test_feature_mask_and_masked_rows():
    model = small_text_model()
    rows = random_rows(3)
    mask = model.feature_mask(rows)
    assert not mask[:, 0].any() and int(mask.sum()) == int((rows > 3).sum())
    masked = model.encoding.masked(rows)
    assert bool((masked[rows != VOCAB.pad] == VOCAB.mask).all()) and bool((masked[rows == VOCAB.pad] == 0).all())
    assert bool((model.encoding.masked(rows, "pad") == VOCAB.pad).all())


def test_token_segments_give_every_word_a_segment_and_the_specials_one():
    model = small_text_model()
    rows = torch.tensor([[1, 7, 8, 9, 2, 0, 0], [1, 5, 2, 0, 0, 0, 0]])
    seg = token_segments(model.encode(rows))
    assert seg.tolist() == [[3, 0, 1, 2, 3, 3, 3], [1, 0, 1, 1, 1, 1, 1]]


@pytest.mark.parametrize("method", TEXT_METHODS)
@pytest.mark.parametrize("family", ["standard", "bcos"])
def test_every_text_method_gives_token_maps_zero_on_padding_and_batch_invariant(method, family):
    model = small_text_model(family)
    m = get_method(method, **({"n_samples": 40} if method == "lime" else {}))
    if method == "native" and family == "standard":
        with pytest.raises(UnsupportedMethodError, match="needs a B-cos"):
            m.check(model)
        return
    rows = random_rows(5, seed=2)
    x, t = model.encode(rows), torch.tensor([0, 1, 2, 1, 0])
    maps = m.attribute(model, x, t)
    assert maps.shape == rows.shape and bool(torch.isfinite(maps).all())
    assert bool((maps[rows == VOCAB.pad].abs() < 1e-6).all())
    torch.testing.assert_close(m.attribute(model, x[2:4], t[2:4]), maps[2:4], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("method", ["gradcam", "lrp", "guided_backprop", "deeplift", "chefer_cam", "attnlrp"])
def test_image_only_methods_refuse_text_models_before_compute(method):
    with pytest.raises(UnsupportedMethodError, match="does not support text models"):
        get_method(method).check(small_text_model())
