"""Portable CPU numerics: the settings under which two x86-64 machines round a run's floats alike, shipped with the
package (``faithbench numerics`` prints them for a shell) and recorded in every row's provenance.

The vectorised kernels of ATen, MKL and oneDNN round differently on each CPU type, and reductions split by thread
count; these pin ATen's default kernels, MKL's reproducible mode, oneDNN at SSE4.1 and 2 intra-op threads. They are
read when torch loads, so they must be in the environment before the run starts (``eval "$(faithbench numerics)"``).
"""

from __future__ import annotations

import os

PORTABLE = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "2",
    "MKL_NUM_THREADS": "2",
}


def numerics_in_effect(env: dict[str, str] | None = None) -> str:
    """``portable`` when every :data:`PORTABLE` setting is in the environment, ``native`` when none is, else the
    ones set (``KEY=VALUE,...``): what a result row records."""
    env = dict(os.environ if env is None else env)
    if all(env.get(k) == v for k, v in PORTABLE.items()):
        return "portable"
    set_ = [f"{k}={env[k]}" for k in PORTABLE if k in env]
    return ",".join(set_) if set_ else "native"


def shell_lines() -> str:
    """``export KEY=VALUE`` lines of :data:`PORTABLE`, for ``eval "$(faithbench numerics)"``."""
    return "".join(f"export {k}={v}\n" for k, v in PORTABLE.items())
