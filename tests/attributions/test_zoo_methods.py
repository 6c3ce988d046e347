"""Every registered method runs through the registry on every zoo model (or is refused up front)."""

import pytest
import torch

from attributions import METHODS, UnsupportedMethodError, get_method
from models import load_model, zoo
from models.data import mnist_splits

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

REASONS = {  # rule-based methods name what they look for (see tests/attributions/test_coverage.py)
    "guided_backprop": "rewrites gradients only at modules of these types or subclasses: nn.ReLU; the model has none",
    "deeplift": "the model has none|it has nn.Softmax modules",
}


@pytest.mark.parametrize("model_name", list(zoo.RECIPES))
def test_every_method_on_every_zoo_model(model_name):
    model = load_model(model_name)
    images, labels = (t[:2] for t in (mnist_splits()[1].images, mnist_splits()[1].labels))
    x = model.encode(images)
    for name in METHODS:
        method = get_method(name, **FAST.get(name, {}))
        if (model_name, name) in EXPECTED_REFUSALS:
            with pytest.raises(UnsupportedMethodError, match=REASONS.get(name)):
                method.check(model)
            continue
        maps = method.attribute(model, x, labels)
        assert maps.shape == (2, 28, 28) and torch.isfinite(maps).all(), (model_name, name)
