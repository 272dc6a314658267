"""MkDocs hook: draw the error hierarchy from the code, at build time.

A page holds the marker line ``<!-- error-hierarchy steadyloop._errors -->``; the hook
replaces it with a tree of every exception class in that module's ``__all__``, so the
reference shows each error the day it is added. Extra built-in bases (``ValueError``,
``LookupError``, …) are named beside the class, since callers may catch those too.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.error_reference")

MARKER = re.compile(r"^<!--\s*error-hierarchy\s+(?P<module>[\w.]+)\s*-->\s*$", re.M)


def hierarchy(module_name: str) -> str:
    """Return the module's exception classes as an indented text tree."""
    module = importlib.import_module(module_name)
    names = list(getattr(module, "__all__", []))
    classes = [
        obj
        for obj in vars(module).values()  # definition order
        if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__name__ in names
    ]
    members = set(classes)
    roots = [c for c in classes if not any(b in members for b in c.__bases__)]
    lines: list[str] = []

    def extra(cls: type) -> str:
        others = [b.__name__ for b in cls.__bases__ if b not in members and b is not Exception]
        return f"  (also {', '.join(others)})" if others else ""

    def walk(cls: type, prefix: str, last: bool, top: bool) -> None:
        if top:
            lines.append(cls.__name__ + extra(cls))
            child_prefix = ""
        else:
            lines.append(f"{prefix}{'└── ' if last else '├── '}{cls.__name__}{extra(cls)}")
            child_prefix = prefix + ("    " if last else "│   ")
        children = [c for c in classes if cls in c.__bases__ and c.__bases__[0] is cls]
        for i, child in enumerate(children):
            walk(child, child_prefix, i == len(children) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    return "```text\n" + "\n".join(lines) + "\n```\n"


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace each error-hierarchy marker of a Markdown page with the tree."""
    if page.file.src_uri.endswith(".ipynb") or "error-hierarchy" not in markdown:
        return markdown

    def replace(match: re.Match[str]) -> str:
        try:
            return hierarchy(match.group("module"))
        except Exception as exc:  # any failure must show, not pass silently
            log.warning("%s: cannot draw the error hierarchy: %r", page.file.src_uri, exc)
            return f"`{match.group('module')}` could not be loaded: `{exc!r}`\n"

    return MARKER.sub(replace, markdown)
