"""Model adapters (standard, B-cos, B-cosified, ALOE) and the offline model zoo.

The registry is filled by the model-adapter work; ``python -m bench list`` shows it.
"""

from bench.registry import Registry

MODELS: Registry = Registry("model")
