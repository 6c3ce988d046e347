"""Which layers of a model a rule-based gradient method rewrites, known before any compute.

Captum's guided backprop and DeepLift change the backward pass only at modules of certain types
(through hooks on them); every other operation -- a nonlinearity called as a function, a B-cos
layer's cosine scaling, GELU, LayerNorm -- passes its plain gradient. On a model with none of those
modules the method silently becomes another one (guided backprop = gradient, DeepLift =
(x - baseline) x gradient), so such a model is refused. A model that mixes covered modules with
other nonlinearities is explained by the hybrid: the rule where a covered module is, the plain
gradient elsewhere (each method's description says so). DeepLift also refuses models with an
``nn.Softmax`` module, where its softmax rule would be misapplied (see ``DEEPLIFT_MODULES``).
"""

from __future__ import annotations

# The table Captum's DeepLift hooks consult (a private name; captum>=0.8 has it), so the check
# follows the installed version.
import copy

import torch
import torch.fx
from captum.attr._core.deep_lift import SUPPORTED_NON_LINEAR
from torch import nn

# Captum's ModifiedReluGradientAttribution hooks ``isinstance(module, nn.ReLU)`` (subclasses too).
GUIDED_BACKPROP_MODULES: tuple[type[nn.Module], ...] = (nn.ReLU,)
# Captum's DeepLift hooks ``type(module) in SUPPORTED_NON_LINEAR`` (exact types, no subclasses). Its
# nn.Softmax rule is left out: it centres the multipliers over the whole tensor -- every sample of
# the batch, head and row at once -- a rule for one final softmax over classes. Inside attention it
# makes an image's map depend on the other images of its batch (by 44 % on vit_mnist), and the
# zoo's models output logits, so any Softmax module is internal: DeepLift refuses models with one.
DEEPLIFT_MODULES: tuple[type[nn.Module], ...] = tuple(t for t in SUPPORTED_NON_LINEAR if t is not nn.Softmax)

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def covered(module: nn.Module, types: tuple[type[nn.Module], ...], exact: bool) -> list[nn.Module]:
    """The submodules whose backward pass the method rewrites."""
    if exact:
        return [m for m in module.modules() if type(m) in types]
    return [m for m in module.modules() if isinstance(m, types)]


def layer_kinds(module: nn.Module, limit: int = 12) -> str:
    """The model's module types (containers and the model's own class left out), for a refusal message."""
    names = sorted({type(m).__name__ for m in module.modules() if m is not module and not isinstance(m, _CONTAINERS)})
    shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return shown or "no submodules"


def uncovered(
    module: nn.Module, types: tuple[type[nn.Module], ...], exact: bool, rules: str, would_be: str
) -> str | None:
    """Why the method's rules would change nothing on ``module`` (None: some module is covered)."""
    if covered(module, types, exact):
        return None
    wanted = ", ".join(sorted(f"nn.{t.__name__}" for t in types))
    match = "of exactly these types" if exact else "of these types or subclasses"
    return (
        f"{rules} only at modules {match}: {wanted}; the model has none (its layers: {layer_kinds(module)}), "
        f"so it would compute {would_be}"
    )


def _listed(names: list[str]) -> str:
    """The first three names, then how many more."""
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def internal_softmax(module: nn.Module) -> str | None:
    """Why DeepLift's softmax rule would be misapplied on ``module`` (None: no nn.Softmax module)."""
    names = [name for name, m in module.named_modules() if type(m) is nn.Softmax]
    if not names:
        return None
    where = _listed(names)
    return (
        f"it has nn.Softmax modules ({where}), and Captum's DeepLift softmax rule centres the multipliers "
        "over the whole tensor (all samples of the batch, heads and rows at once): meant for one final "
        "softmax over classes, inside the model (attention) it makes each map depend on the rest of the batch"
    )


def reused(module: nn.Module, types: tuple[type[nn.Module], ...], exact: bool) -> str | None:
    """Why Captum's DeepLift would fail on ``module``: a module it hooks is called more than once in one forward (a
    torchvision ResNet block calls its one nn.ReLU three times), and its rule keeps one input and output per module.
    Read from the module's symbolic trace (torch.fx), so the model never runs; None where every hooked module is
    called once, or where the model cannot be traced (Captum then decides at run time)."""
    bare = copy.deepcopy(module)  # traced without the hooks a run counts its model calls with
    for m in bare.modules():
        m._forward_hooks.clear()
        m._forward_pre_hooks.clear()
    try:
        graph = torch.fx.symbolic_trace(bare).graph
    except Exception:  # noqa: BLE001 - untraceable control flow: nothing known before compute
        return None
    hooked = {name for name, m in module.named_modules() if (type(m) in types if exact else isinstance(m, types))}
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module" and node.target in hooked:
            calls[node.target] = calls.get(node.target, 0) + 1
    twice = sorted(name for name, n in calls.items() if n > 1)
    if not twice:
        return None
    where = _listed(twice)
    return (
        f"its modules {where} are each called more than once per forward pass (as a torchvision ResNet block reuses "
        "its one nn.ReLU), and Captum's DeepLift keeps one input and output per module, so its rule cannot apply"
    )
