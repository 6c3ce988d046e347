"""Tables as text, Markdown and LaTeX (pandas only: the light formatters ``compare`` and the report share). Text
tables wider than the terminal are cut into blocks of columns, each repeating the key columns."""

from __future__ import annotations

import pandas as pd

WIDTH = 120  # characters of a text table's line before its columns wrap into another block


def to_text(table: pd.DataFrame, width: int | None = None, keys: int = 0) -> str:
    """Aligned columns; with ``width``, the columns after the first ``keys`` are cut into blocks no wider than
    ``width`` (a block always takes at least one column), each block repeating the key columns."""
    cols = list(table.columns)
    widths = {c: max(len(str(c)), *(len(str(v)) for v in table[c])) for c in cols}
    blocks = [cols[keys:]]
    if width is not None:
        room = width - sum(widths[c] + 2 for c in cols[:keys])
        blocks, used = [[]], 0
        for c in cols[keys:]:
            if blocks[-1] and used + widths[c] > room:
                blocks.append([])
                used = 0
            blocks[-1].append(c)
            used += widths[c] + 2
    parts = []
    for block in blocks:
        shown = cols[:keys] + block
        lines = ["  ".join(str(c).ljust(widths[c]) for c in shown).rstrip()]
        lines.append("  ".join("-" * widths[c] for c in shown))
        for _, row in table[shown].iterrows():
            lines.append("  ".join(str(row[c]).ljust(widths[c]) for c in shown).rstrip())
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def to_markdown(table: pd.DataFrame) -> str:
    cols = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame) -> str:
    def esc(v: object) -> str:
        s = str(v).replace("_", r"\_").replace("±", r"$\pm$").replace("↑", r"$\uparrow$")
        s = s.replace("★", r"$\star$").replace("≈", r"$\approx$").replace("⊛", r"$\circledast$")  # amssymb
        return s.replace("↓", r"$\downarrow$").replace("%", r"\%").replace("–", "--")

    cols = [esc(c) for c in table.columns]
    lines = [r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule", " & ".join(cols) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(v) for v in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
