"""Re-initialising a model's layers: the model-randomisation sanity check (:mod:`faithbench.metrics.randomisation`)
and the ``randomised_model`` corruption control (:mod:`faithbench.attributions.corruptions`).

Re-initialisation (``init``): ``gaussian-matched`` redraws every entry of each parameter tensor from a normal
distribution with that tensor's own mean and standard deviation (seeded), so activations keep their scale;
``default`` calls the layer's own ``reset_parameters()`` (PyTorch's initialisation, seeded). Tensors with fewer than
two entries or no spread (e.g. a LayerNorm gain of exactly 1) are kept, as are buffers.
"""

from __future__ import annotations

import torch
from torch import nn

INITS = ("gaussian-matched", "default")


def parameter_layers(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules that own parameters, in registration order (bottom to top)."""
    return [(name, m) for name, m in module.named_modules() if any(True for _ in m.parameters(recurse=False))]


@torch.no_grad()
def randomise_layer(layer: nn.Module, init: str, generator: torch.Generator) -> None:
    """Re-initialise ``layer``'s own parameters in place (see the module docstring)."""
    if init == "default" and hasattr(layer, "reset_parameters"):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
            layer.reset_parameters()
        return
    for p in layer.parameters(recurse=False):
        if p.numel() < 2 or float(p.std()) == 0.0:
            continue
        noise = torch.randn(p.shape, generator=generator, dtype=torch.float64)
        p.copy_((noise * p.std().double().cpu() + p.mean().double().cpu()).to(p))
