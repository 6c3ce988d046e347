"""Model adapters (standard, B-cos, B-cosified, ALOE) behind one protocol, and the offline zoo."""

from faithbench.models.adapter import FAMILIES, ModelAdapter, ModelSpec, input_x_gradient
from faithbench.models.bcosify import bcosify
from faithbench.models.registry import MODELS, load_model
from faithbench.models.user import timm_model, torchvision_model, wrap_model, wrap_text_model

__all__ = [
    "FAMILIES",
    "MODELS",
    "ModelAdapter",
    "ModelSpec",
    "bcosify",
    "input_x_gradient",
    "load_model",
    "timm_model",
    "torchvision_model",
    "wrap_model",
    "wrap_text_model",
]
