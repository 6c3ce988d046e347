"""What ``python -m bench perf`` times: the cases (a model at a size, with its methods) and the problem sizes, by
default for a GPU and, with ``--quick``, for a CPU; and how many rounds every ratio's sides are timed in turns
(:func:`faithbench.bench.perf.timing.in_turns`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CHEAP_METHODS = ("gradient", "input_x_gradient", "integrated_gradients", "gradcam", "lrp")
BCOS_METHODS = (*CHEAP_METHODS, "native", "lime", "shapley_sampling")


@dataclass(frozen=True)
class PerfCase:
    """One model at one size; ``model`` is a registered model name (torchvision ones get random weights)."""

    model: str
    image_size: int
    batch_size: int
    block_size: int  # deletion / insertion blocks and RegionPerturbation's patch
    methods: tuple[str, ...]


@dataclass(frozen=True)
class PerfSizes:
    """Problem sizes shared by every case."""

    repeats: int = 10  # rounds timed in turns (each side once per round), after the warm-up rounds
    warmup: int = 2
    min_seconds: float = 0.02  # a side faster than this is called repeatedly in one timed run (timing.in_turns)
    fractions: tuple[float, ...] | None = None  # deletion and insertion; None: ALOE's 0, .01, ..., .8
    erasure_fractions: tuple[float, ...] | None = None  # None: the eraser summary's 1, 5, 10, 20, 50 %
    road_fractions: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9)  # ROAD's (the authors' seven)
    flip_steps: int = 16  # PixelFlipping steps (rounded up to a count that flips whole pixels)
    regions: int = 16  # RegionPerturbation regions
    n_quantus: int = 16  # images (GridPG: cell maps) Quantus is timed on
    chunk_size: int = 256  # inputs per model call in every metric and method (max_batch)
    robust_method: str = "input_x_gradient"  # the method the robustness family explains again with
    robust_draws: int = 10  # draws per image (captum's sensitivity_max default)
    robust_radius: float = 0.02
    infidelity_perturbations: int = 10  # captum's n_perturb_samples default
    continuity_steps: int = 28  # Quantus Continuity's nr_steps default (the shift 0 not explained)
    randomisation_init: str = "default"  # emprt / smprt: each layer's reset_parameters, as Quantus re-initialises
    smprt_depths: int = 4  # sMPRT's cascade points ([smprt]'s n_depths); eMPRT: one point, every layer re-initialised
    smprt_noisy: int = 10  # sMPRT's noisy copies per image ([smprt]'s n_noisy; Quantus' nr_samples default is 50)
    method_params: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "integrated_gradients": {"n_steps": 8},
            "lime": {"n_samples": 64},
            "shapley_sampling": {"n_samples": 2},
        }
    )


PARTS = ("metrics", "robustness", "methods")  # what a case times: --only selects some of them


def parse_case(text: str, quick: bool = False) -> PerfCase:
    """``MODEL:PX:BATCH`` (``--case``) as a case: deletion blocks of PX / 14 px (at least 1), and the methods of the
    default case of that model (else ``CHEAP_METHODS``)."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit() or min(int(parts[1]), int(parts[2])) < 1:
        raise ValueError(f"a perf case is MODEL:PX:BATCH with positive integers, e.g. resnet18:224:4; got {text!r}")
    model, size, batch = parts[0], int(parts[1]), int(parts[2])
    known = {c.model: c.methods for c in (*(QUICK_CASES if quick else ()), *DEFAULT_CASES, *QUICK_CASES)}
    return PerfCase(model, size, batch, max(1, size // 14), known.get(model, CHEAP_METHODS))


DEFAULT_CASES = (PerfCase("resnet50", 224, 64, 16, CHEAP_METHODS), PerfCase("bcos_cnn_mnist", 28, 64, 4, BCOS_METHODS))
DEFAULT_SIZES = PerfSizes()
QUICK_CASES = (PerfCase("resnet18", 96, 8, 16, CHEAP_METHODS), PerfCase("bcos_cnn_mnist", 28, 8, 4, BCOS_METHODS))
QUICK_SIZES = PerfSizes(
    repeats=7,
    warmup=1,
    min_seconds=0.05,
    fractions=(0.0, 0.1, 0.3, 0.6),
    erasure_fractions=(0.1, 0.5),
    road_fractions=(0.1, 0.5, 0.9),
    flip_steps=6,
    regions=6,
    n_quantus=2,
    chunk_size=64,
    robust_draws=3,
    infidelity_perturbations=3,
    continuity_steps=7,
    smprt_depths=2,
    smprt_noisy=3,
    method_params={
        "integrated_gradients": {"n_steps": 4},
        "lime": {"n_samples": 16},
        "shapley_sampling": {"n_samples": 1},
    },
)
QUICK_HELP = (
    "CI-friendly sizes for a CPU: torchvision resnet18 with random weights at 96 px and bcos_cnn_mnist at 28 px, "
    "batch 8; deletion/insertion at fractions 0, .1, .3, .6 (blocks of 16 and 4 px); comprehensiveness/sufficiency "
    "at 10 and 50 %%; 6 PixelFlipping steps and RegionPerturbation regions; Quantus on 2 images; at most 64 inputs "
    "per model call; IG 4 steps, LIME 16 samples, Shapley 1 sample; 3 robustness draws and infidelity perturbations, "
    "7 continuity steps; sMPRT 2 cascade points of 3 noisy copies; every ratio's sides timed in turns, 7 rounds "
    "after 1 warm-up, runs under 50 ms repeated to 50 ms (about 5 min on a 2-core CPU shared with other jobs, with "
    "OMP_NUM_THREADS=1, which such a CPU needs). Default, sizes for a GPU: resnet50 at 224 px and bcos_cnn_mnist at "
    "28 px, batch 64, ALOE's fractions, 16 steps and regions, Quantus on 16 images, 256 inputs per call, 10 "
    "robustness draws and infidelity perturbations, Quantus' 28 continuity steps, sMPRT 4 cascade points of 10 noisy "
    "copies, 10 rounds "
    "after 2 warm-up"
)
