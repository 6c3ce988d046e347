"""mkdocs hooks: ``::: dotted.name`` on a line of its own becomes that function's signature and docstring, read from
the installed faithbench when the site is built (the docstring is the one source of a metric's formula); every page
in ``docs/metrics/`` joins the navigation and the metrics index (``<!-- metric pages -->``) by its title, so a new
metric's page is one file, listed nowhere by hand.

mkdocstrings' static reader cannot see faithbench's layers (they live in bench/, metrics/, ... and are mapped under
the faithbench root at install), so the docstrings are read by importing the objects instead."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

METRIC_PAGES = Path(__file__).parent / "metrics"
INDEX_MARK = "<!-- metric pages -->"


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _render(match: re.Match) -> str:
    dotted = match.group(1)
    obj = _resolve(dotted)  # an unknown name fails the build: the page names a function that does not exist
    signature = f"{obj.__name__}{inspect.signature(obj)}"
    return f"### `{dotted.rsplit('.', 1)[-1]}`\n\n```python\n{signature}\n```\n\n```text\n{inspect.getdoc(obj)}\n```"


def metric_pages() -> list[tuple[str, str]]:
    """(title, path under docs/) of every metric page but the index, by title."""
    pages = []
    for page in METRIC_PAGES.glob("*.md"):
        if page.name != "index.md":
            title = next(line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# "))
            pages.append((title, f"metrics/{page.name}"))
    return sorted(pages, key=lambda p: p[0].lower())


def on_config(config, **kwargs):
    """The navigation's Metrics section: its index, then every metric page."""
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Metrics" in entry:
            entry["Metrics"] = ["metrics/index.md", *(path for _, path in metric_pages())]
    return config


def on_page_markdown(markdown: str, page=None, **kwargs) -> str:
    if INDEX_MARK in markdown:
        links = "\n".join(f"- [{title}]({Path(path).name})" for title, path in metric_pages())
        markdown = markdown.replace(INDEX_MARK, links)
    return re.sub(r"^::: ([\w.]+)$", _render, markdown, flags=re.M)
