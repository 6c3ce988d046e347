"""mkdocs hook: ``::: dotted.name`` on a line of its own becomes that function's signature and docstring, read from
the installed faithbench when the site is built (the docstring is the one source of a metric's formula).

mkdocstrings' static reader cannot see faithbench's layers (they live in bench/, metrics/, ... and are mapped under
the faithbench root at install), so the docstrings are read by importing the objects instead."""

from __future__ import annotations

import importlib
import inspect
import re


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _render(match: re.Match) -> str:
    dotted = match.group(1)
    obj = _resolve(dotted)  # an unknown name fails the build: the page names a function that does not exist
    signature = f"{obj.__name__}{inspect.signature(obj)}"
    return f"### `{dotted.rsplit('.', 1)[-1]}`\n\n```python\n{signature}\n```\n\n```text\n{inspect.getdoc(obj)}\n```"


def on_page_markdown(markdown: str, **kwargs) -> str:
    return re.sub(r"^::: ([\w.]+)$", _render, markdown, flags=re.M)
