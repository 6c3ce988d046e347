"""Attribution adapters (Captum, zennit LRP, LIME, native W(x)x) behind one interface.

The registry is filled by the attribution-adapter work; ``python -m bench list`` shows it.
"""

from bench.registry import Registry

METHODS: Registry = Registry("method")
