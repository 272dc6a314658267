"""MkDocs hook: let notebooks survive mkdocs-static-i18n, and keep their TOC links whole.

Why (DOCS-NOTES.md, traps 1 and 8):

* mkdocs-jupyter marks a notebook as a page by wrapping its ``File`` in its own class.
  mkdocs-static-i18n rebuilds every file in a late ``on_files`` as a plain ``File``,
  which drops that wrapper: the notebook is then copied as an asset and its page holds
  the notebook's JSON text, while ``mkdocs build --strict`` still passes. Here
  ``File.is_documentation_page`` also answers yes for ``.ipynb`` sources, so the i18n
  plugin sorts notebooks as pages of their own language (right URL, right alternate)
  and MkDocs builds a page for each; mkdocs-jupyter then renders them as usual.
* A notebook's table of contents is computed apart from its HTML: a Chinese heading
  gets an empty slug in the TOC but a real id in the HTML, so TOC links break. After
  rendering, the TOC anchors of a notebook page are set to the ids its HTML headings
  actually carry, heading by heading.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from mkdocs.structure.files import File
from mkdocs.structure.pages import Page
from mkdocs.structure.toc import AnchorLink

_NOTEBOOK_SUFFIX = ".ipynb"
_original_is_documentation_page = File.is_documentation_page


def _is_documentation_page(self: File) -> bool:
    """A Markdown source, as before, or a notebook."""
    if self.src_uri.endswith(_NOTEBOOK_SUFFIX):
        return True
    return _original_is_documentation_page(self)


def on_startup(command: str, dirty: bool) -> None:
    """Install the patch once per MkDocs process (``build``, ``serve`` or ``gh-deploy``)."""
    File.is_documentation_page = _is_documentation_page  # type: ignore[method-assign]


_HEADING = re.compile(r"<h([1-6])\b[^>]*\bid=\"([^\"]*)\"[^>]*>(.*?)</h\1>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _headings(html: str) -> list[tuple[int, str, str]]:
    """Return (level, id, text) of each heading with an id, in document order."""
    found = []
    for level, anchor, inner in _HEADING.findall(html):
        text = unescape(_TAG.sub("", inner)).replace("¶", "").strip()
        found.append((int(level), unescape(anchor), text))
    return found


def _walk(items: list[AnchorLink]) -> list[AnchorLink]:
    out: list[AnchorLink] = []
    for item in items:
        out.append(item)
        out.extend(_walk(item.children))
    return out


def on_page_content(html: str, page: Page, **kwargs: Any) -> str:
    """Point a notebook page's TOC entries at the ids its headings really have."""
    if not page.file.src_uri.endswith(_NOTEBOOK_SUFFIX):
        return html
    headings = _headings(html)
    used = 0
    for link in _walk(list(page.toc)):
        # Headings in the HTML that the TOC leaves out (deeper than toc_depth) are skipped.
        while used < len(headings) and headings[used][0] != link.level:
            used += 1
        if used == len(headings):
            break
        link.id = headings[used][1]
        used += 1
    return html
