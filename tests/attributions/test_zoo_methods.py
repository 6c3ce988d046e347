"""Every registered method runs through the registry on every zoo model (or is refused up front)."""

import pytest
import torch

from faithbench.attributions import METHODS, TRUTH_CONTROLS, UnsupportedMethodError, get_method
from faithbench.models import load_model, zoo
from faithbench.models.data.mnist import mnist_splits

FAST = {
    "lime": {"n_samples": 30, "segmentation": "slic"},
    "shapley_sampling": {"n_samples": 1},
    "integrated_gradients": {"n_steps": 8},
}
EXPECTED_REFUSALS = {
    ("cnn_mnist", "native"),
    ("vit_mnist", "native"),
    ("cnn_mnist", "attention_rollout"),
    ("bcos_cnn_mnist", "attention_rollout"),
    ("bcosified_cnn_mnist", "attention_rollout"),
    ("vit_mnist", "gradcam"),
    ("aloe_vit_mnist", "gradcam"),
    ("vit_mnist", "lrp"),
    ("aloe_vit_mnist", "lrp"),
    ("cnn_mnist", "native_normalised"),
    ("bcos_cnn_mnist", "native_normalised"),
    ("vit_mnist", "native_normalised"),
    ("bcos_cnn_mnist", "guided_backprop"),
    ("vit_mnist", "guided_backprop"),
    ("aloe_vit_mnist", "guided_backprop"),
    ("bcos_cnn_mnist", "deeplift"),
    ("vit_mnist", "deeplift"),
    ("aloe_vit_mnist", "deeplift"),
}

# The test bed's models (models/zoo/entries.py TEST_BED) refuse what their kind refuses.
_TEST_BED_REFUSALS = {
    "cnn_gap_mnist": ("native", "native_normalised", "attention_rollout"),
    "bcosified_cnn_gap_mnist": ("attention_rollout",),
    "bcosified_cnn_gap_mnist_b1": ("attention_rollout",),
    "bcosified_cnn_gap_mnist_b1_5": ("attention_rollout",),
    "bcosified_cnn_gap_mnist_b2_5": ("attention_rollout",),
    "bcosified_cnn_gap_mnist_bias": ("attention_rollout",),
    **{
        f"bcos_gap_cnn_mnist_b{b}": ("native_normalised", "guided_backprop", "deeplift", "lrp", "attention_rollout")
        for b in ("1", "1_25", "1_5", "2", "2_5")
    },  # no ReLU, no InputNormalization; zennit has no rule for MaxOut
    "bcos_gap_cnn_mnist": (
        "native_normalised",
        "guided_backprop",
        "deeplift",
        "attention_rollout",
    ),  # as bcos_cnn_mnist
    "bcos_vit_mnist": ("native_normalised", "guided_backprop", "deeplift", "gradcam", "lrp"),
    "bcos_vitc_mnist": ("native_normalised", "guided_backprop", "deeplift", "gradcam", "lrp"),  # its stem as well
    "bcosified_vit_mnist": ("guided_backprop", "deeplift", "gradcam", "lrp"),
}
# The animal-mnist models are their digit twins' recipes on other data: they refuse the same.
_TEST_BED_REFUSALS |= {
    m.replace("_mnist", "_animal"): refused
    for m, refused in _TEST_BED_REFUSALS.items()
    if "gap" in m and "bias" not in m
}
EXPECTED_REFUSALS |= {(model, method) for model, methods in _TEST_BED_REFUSALS.items() for method in methods}
# The in-domain variants (models/zoo/recipes.py in_domain) are their parents' architectures: they refuse the same.
EXPECTED_REFUSALS |= {(f"{m}_idsds", method) for m, method in EXPECTED_REFUSALS if f"{m}_idsds" in zoo.RECIPES}
# CheferCAM, AttnLRP and last-layer attention need readable attention like rollout: models refusing one refuse all.
EXPECTED_REFUSALS |= {
    (model, other)
    for model, method in EXPECTED_REFUSALS
    if method == "attention_rollout"
    for other in ("chefer_cam", "attnlrp", "attention_last")
}

REASONS = {  # rule-based methods name what they look for (see tests/attributions/test_coverage.py)
    "guided_backprop": "rewrites gradients only at modules of these types or subclasses: nn.ReLU; the model has none",
    "deeplift": "the model has none|it has nn.Softmax modules",
}


@pytest.mark.parametrize("model_name", [n for n, r in zoo.RECIPES.items() if r.modality == "image"])
def test_every_method_on_every_zoo_model(model_name):
    model = load_model(model_name)
    images, labels = (t[:2] for t in (mnist_splits()[1].images, mnist_splits()[1].labels))
    x = model.encode(images)
    for name in METHODS:
        method = get_method(name, **FAST.get(name, {}))
        if method.capabilities.ground_truth:
            continue  # the oracle has maps only inside a metric (tests/attributions/test_controls.py)
        if name in TRUTH_CONTROLS:  # only the hand-set models have a known attribution (tests/bench/test_card.py)
            with pytest.raises(UnsupportedMethodError, match="its attribution is not known"):
                method.check(model)
            continue
        if (model_name, name) in EXPECTED_REFUSALS:
            with pytest.raises(UnsupportedMethodError, match=REASONS.get(name)):
                method.check(model)
            continue
        maps = method.attribute(model, x, labels)
        assert maps.shape == (2, 28, 28) and torch.isfinite(maps).all(), (model_name, name)
