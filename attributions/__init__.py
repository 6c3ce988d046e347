"""Attribution adapters (Captum, zennit LRP, LIME, attention rollout, native W(x)x) behind one interface.

``METHODS`` (:mod:`.registry`) maps names to method classes; ``get_method(name, **params)`` builds one with checked
parameters; ``method.attribute(model, inputs, targets)`` returns channel-summed maps (B, H, W).
"""

from faithbench.attributions.base import AttributionMethod, Capabilities, UnsupportedMethodError
from faithbench.attributions.registry import (
    ALL_CONTROLS,
    CONTROLS,
    CORRUPTION_CONTROLS,
    METHODS,
    RUN_CONTROLS,
    TRUTH_CONTROLS,
    get_method,
    register_method,
)

__all__ = [
    "ALL_CONTROLS",
    "CONTROLS",
    "CORRUPTION_CONTROLS",
    "RUN_CONTROLS",
    "TRUTH_CONTROLS",
    "METHODS",
    "AttributionMethod",
    "Capabilities",
    "UnsupportedMethodError",
    "get_method",
    "register_method",
]
