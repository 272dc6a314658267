"""MkDocs hook: let notebooks survive mkdocs-static-i18n, and keep their TOC links whole.

Why (DOCS-NOTES.md, traps 1 and 8):

* mkdocs-jupyter marks a notebook as a page by wrapping its ``File`` in its own class.
  mkdocs-static-i18n rebuilds every file in a late ``on_files`` as a plain ``File``,
  which drops that wrapper: the notebook is then copied as an asset and its page holds
  the notebook's JSON text, while ``mkdocs build --strict`` still passes. Here
  ``File.is_documentation_page`` also answers yes for ``.ipynb`` sources, so the i18n
  plugin sorts notebooks as pages of their own language (right URL, right alternate)
  and MkDocs builds a page for each; mkdocs-jupyter then renders them as usual.
* A notebook's headings get their ids from nbconvert, and its table of contents is
  computed apart from its HTML. A Chinese heading gets an empty id (``id=""``) and its
  TOC entry and permalink point at ``#``. After rendering, a heading without an id gets
  one (the same Unicode slug Markdown pages use, or ``section-N``), and the TOC anchors
  of the page are set to the ids its HTML headings really carry, heading by heading.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

from mkdocs.structure.files import File
from mkdocs.structure.pages import Page
from mkdocs.structure.toc import AnchorLink
from pymdownx.slugs import slugify  # type: ignore[import-untyped]

_slugify = slugify(case="lower")

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


def _fill_empty_ids(html: str) -> str:
    """Give every heading with an empty id a unique, non-empty one."""
    taken = {m.group(1) for m in re.finditer(r'\bid="([^"]+)"', html)}

    def fix(match: re.Match[str]) -> str:
        level, inner = match.group(1), match.group(2)
        text = unescape(_TAG.sub("", inner)).replace("¶", "").strip()
        base = _slugify(text, "-") or "section"
        anchor, n = base, 1
        while anchor in taken:
            n += 1
            anchor = f"{base}_{n}"
        taken.add(anchor)
        inner = inner.replace(
            'class="anchor-link" href="#"', f'class="anchor-link" href="#{anchor}"'
        )
        return f'<h{level} id="{anchor}">{inner}</h{level}>'

    return _EMPTY_ID_HEADING.sub(fix, html)


_EMPTY_ID_HEADING = re.compile(r'<h([1-6]) id="">(.*?)</h\1>', re.S)


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
    html = _fill_empty_ids(html)
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
