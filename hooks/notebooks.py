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
  computed apart from its HTML. A Chinese heading gets an empty id (``id=""``) or a
  slug of its Chinese text, which the English page does not share, so the language
  switch (``site.js`` keeps the ``#anchor``) would land at the top of the page. Here
  every heading of a notebook page, in either language, takes the id of the heading at
  the same position in the *English* notebook (a slug of its English text, the same
  Unicode slug Markdown pages use): both pages of a pair carry the same ids. The parity
  test keeps the two notebooks' heading structure the same; a notebook whose heading
  count differs from its English counterpart's fails the build, naming both counts.
* The TOC anchors of the page are then set to the ids its HTML headings carry, heading
  by heading, and each TOC entry's title to its heading's text, inline code included
  (mkdocs-jupyter's TOC drops code spans: "Decide, with" for "Decide, with
  ``steadyloop runs resolve``"). The title is plain text, as on Markdown pages.
"""

from __future__ import annotations

import json
import re
from html import escape, unescape
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
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
_DEFAULT_LANGUAGE = "en"
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_MD_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
# Code and emphasis marks; an underscore only outside a word (RESUME_STATE_UNKNOWN stays).
_MD_MARKS = re.compile(r"`+|\*+|(?<!\w)_+|_+(?!\w)")


def markdown_headings(notebook: Path) -> list[tuple[int, str]]:
    """(level, plain text) of each heading of the notebook's Markdown cells, in order."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found: list[tuple[int, str]] = []
    for cell in cells:
        if cell["cell_type"] != "markdown":
            continue
        source = cell["source"]
        fenced = None
        for line in ("".join(source) if isinstance(source, list) else source).splitlines():
            fence = _MD_FENCE.match(line)
            if fence:
                mark = fence.group(1)[0]
                fenced = None if fenced == mark else (fenced or mark)
                continue
            m = None if fenced else _MD_HEADING.match(line)
            if m:
                text = _MD_LINK.sub(r"\1", m.group(2))
                found.append((len(m.group(1)), _MD_MARKS.sub("", text).strip()))
    return found


def shared_ids(texts: list[str]) -> list[str]:
    """Unique heading ids from (English) heading texts: slugs, ``_2`` on a repeat."""
    taken: set[str] = set()
    ids = []
    for text in texts:
        base = _slugify(text, "-") or "section"
        anchor, n = base, 1
        while anchor in taken:
            n += 1
            anchor = f"{base}_{n}"
        taken.add(anchor)
        ids.append(anchor)
    return ids


def _english_counterpart(page: Page, docs_dir: str) -> Path:
    """The English source of a notebook page of any language (folder structure)."""
    rel = page.file.src_uri
    first, _, rest = rel.partition("/")
    if rest and len(first) <= 5 and (Path(docs_dir) / first).is_dir():
        rel = rest  # "zh/tutorials/notebooks/x.ipynb" -> "tutorials/notebooks/x.ipynb"
    return Path(docs_dir) / _DEFAULT_LANGUAGE / rel


_ANY_HEADING = re.compile(r"<h([1-6])\b([^>]*)>(.*?)</h\1>", re.S)
_ID_ATTR = re.compile(r'\s\bid="[^"]*"')
_ANCHOR_LINK = re.compile(r'(class="anchor-link" href=")#[^"]*(")')


def give_shared_ids(html: str, ids: list[str], where: str) -> str:
    """Set the id (and permalink) of the n-th heading of ``html`` to ``ids[n]``."""
    count = len(_ANY_HEADING.findall(html))
    if count != len(ids):
        raise PluginError(
            f"notebooks: {where} has {count} headings, its English notebook {len(ids)};"
            " the two must have the same headings for the language switch to keep the #anchor"
        )
    position = iter(ids)

    def fix(match: re.Match[str]) -> str:
        level, attrs, inner = match.groups()
        anchor = escape(next(position))
        attrs = _ID_ATTR.sub("", attrs)
        inner = _ANCHOR_LINK.sub(rf"\g<1>#{anchor}\g<2>", inner)
        return f'<h{level} id="{anchor}"{attrs}>{inner}</h{level}>'

    return _ANY_HEADING.sub(fix, html)


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


def on_page_content(html: str, page: Page, config: Any, **kwargs: Any) -> str:
    """Give a notebook page the English notebook's heading ids; point its TOC at them."""
    if not page.file.src_uri.endswith(_NOTEBOOK_SUFFIX):
        return html
    english = _english_counterpart(page, config["docs_dir"])
    if english.is_file():
        ids = shared_ids([text for _, text in markdown_headings(english)])
        html = give_shared_ids(html, ids, page.file.src_uri)
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
        link.title = escape(headings[used][2], quote=False)
        used += 1
    return html
