"""What every report figure shares: the resolution, the size limits a reader's screen sets, a marker and line style
per method (its colour is :mod:`faithbench.bench.report.order`'s), the direction words and the saving of a PNG."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image

from faithbench.bench.report.order import is_control, method_colour
from faithbench.bench.store.run_catalog import current

DPI = 100
WIDTH_IN = 16.0  # 1600 px at DPI: the width a report page shows a figure at
MAX_PX = (2400, 3000)  # no figure is wider or taller than this (tests check it)

# Controls are references, not contestants: grey, each with its own dash so they stay apart from one another.
_CONTROL_DASHES = {"random": (0, (5, 2)), "uniform": (0, (1, 1.5)), "centre": (0, (6, 2, 1, 2)), "edges": (0, (2, 2))}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "*", "d", "H", "8")


def method_marker(method: str) -> str:
    """A marker fixed by the method's place in the registry, so colour and marker both identify it (the figures
    show first runs only, never a rerun)."""
    names = current().methods
    index = names.index(method) if method in names else sum(map(ord, method))
    return _MARKERS[index % len(_MARKERS)]


def line_style(method: str) -> dict[str, Any]:
    """Keyword arguments of ``ax.plot`` for the method's curve: coloured with markers, or a thin grey dashed
    reference line for a control."""
    if is_control(method):
        dash = _CONTROL_DASHES.get(method, (0, (3, 1, 1, 1)))
        return {"color": method_colour(method), "linestyle": dash, "linewidth": 1.4, "zorder": 1}
    return {
        "color": method_colour(method),
        "marker": method_marker(method),
        "markersize": 4.5,
        "markeredgecolor": "#333333",
        "markeredgewidth": 0.4,
        "linewidth": 1.8,
        "zorder": 2,
    }


def better(higher: bool) -> str:
    return "higher is better ↑" if higher else "lower is better ↓"


def axis_label(metric: str, unit: object) -> str:
    return f"{metric} [{unit}]" if isinstance(unit, str) and unit else metric


def number(value: float, span: float) -> str:
    """A cell's value with as many decimals as the metric's span of values needs (80.6, 0.23, 0.004)."""
    if value != value:
        return "–"
    digits = 1 if span >= 10 else 2 if span >= 0.1 else 3
    return f"{value:.{digits}f}"


def side_legend(fig: Any, handles: list, labels: list[str], width_in: float, **layout: Any) -> None:
    """Lay the panels out left of a ``width_in``-inch column and put the methods' legend in it (``layout``: more
    ``tight_layout`` keywords, e.g. ``rect`` or padding)."""
    right = 1 - width_in / fig.get_figwidth()
    rect = layout.pop("rect", (0, 0, right, 1))
    fig.tight_layout(rect=rect, **layout)
    fig.legend(handles, labels, loc="center left", frameon=False, fontsize=9, bbox_to_anchor=(right + 0.005, 0.5),
               title="method", title_fontsize=9)  # fmt: skip


def save(fig: Any, path: Path, plt: Any) -> Path:
    """Write ``fig`` as a PNG at :data:`DPI`, reduced to a 256-colour palette: the report page embeds every figure,
    and the maps' noise makes full-colour PNGs several times larger for no visible gain."""
    buffer = io.BytesIO()  # raw RGBA, not a PNG: it is quantized and encoded once below
    bbox = "tight"
    if fig.dpi == DPI and fig.get_layout_engine() is None:  # the tight box without savefig's extra layout draw
        bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.08)
    fig.savefig(buffer, format="rgba", dpi=DPI, bbox_inches=bbox, pad_inches=0.08, facecolor="white")
    renderer = fig.canvas.renderer  # the cropped canvas the figure was just printed on: the raw image's size
    size = (int(renderer.width), int(renderer.height))
    plt.close(fig)
    if size[0] * size[1] * 4 != buffer.getbuffer().nbytes:
        raise RuntimeError(f"raw figure of {buffer.getbuffer().nbytes} bytes is not {size[0]} x {size[1]} RGBA")
    image = Image.frombuffer("RGBA", size, buffer.getbuffer(), "raw", "RGBA", 0, 1).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path
