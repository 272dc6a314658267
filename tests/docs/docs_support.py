"""Paths, page lists and HTML helpers shared by the documentation tests."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "notebooks"
LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
SITE_PREFIX = "/steadyloop/"  # the path of site_url in mkdocs.yml
BUILD_TIMEOUT = 600


@dataclass(frozen=True)
class BuiltSite:
    """The result of the one strict build of the session."""

    root: Path
    seconds: float
    log: str
    notebook_seconds: float = 0.0
    """How long executing the notebooks not yet cached took, before the build."""

    def page(self, lang: str, rel: str) -> Path:
        """The HTML file of page ``rel`` (``""`` for the home page) in ``lang``."""
        base = self.root if lang == DEFAULT_LANGUAGE else self.root / lang
        return base / rel / "index.html" if rel else base / "index.html"


def load_notebook_cache() -> ModuleType:
    """``hooks/notebook_cache.py``, the module the root ``conftest.py`` runs nbmake through."""
    name = "steadyloop_notebook_cache"  # the name the root conftest.py loads it under
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "hooks" / "notebook_cache.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build_env() -> dict[str, str]:
    """The environment of a docs build: Material's MkDocs 2 banner silenced (trap 10)."""
    env = dict(os.environ)
    env["NO_MKDOCS_2_WARNING"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def markdown_pages(lang: str) -> list[str]:
    """Source pages of a language, relative to its folder, as POSIX paths."""
    base = DOCS / lang
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*.md"))


def notebook_pages(lang: str) -> list[str]:
    """Notebooks linked into a language's docs folder, relative to it (symlinks followed)."""
    base = DOCS / lang
    found = []
    for folder, _dirs, files in os.walk(base, followlinks=True):
        for name in files:
            if name.endswith(".ipynb") and ".ipynb_checkpoints" not in folder:
                found.append((Path(folder) / name).relative_to(base).as_posix())
    return sorted(found)


def page_url(rel_source: str) -> str:
    """The directory URL (relative to the language root) of a source page."""
    stem = rel_source.rsplit(".", 1)[0]
    if stem == "index":
        return ""
    if stem.endswith("/index"):
        return stem[: -len("/index")]
    return stem


# -- a small DOM on top of the standard library's HTML parser -----------------------------

_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)


@dataclass
class Node:
    """One element of a parsed page."""

    tag: str
    attrs: dict[str, str]
    children: list[Node | str]
    parent: Node | None = None

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def iter(self) -> list[Node]:
        """This element and every element below it, in document order."""
        out: list[Node] = [self]
        for child in self.children:
            if isinstance(child, Node):
                out.extend(child.iter())
        return out

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        return [
            n
            for n in self.iter()
            if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
        ]

    def text(self) -> str:
        parts: list[str] = []
        for child in self.children:
            parts.append(child.text() if isinstance(child, Node) else child)
        return "".join(parts)


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, [])
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, [], self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(
            Node(tag, {k: v or "" for k, v in attrs}, [], self.stack[-1])
        )

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(path: Path) -> Node:
    """Parse an HTML file into a :class:`Node` tree."""
    builder = _TreeBuilder()
    builder.feed(path.read_text(encoding="utf-8"))
    builder.close()
    return builder.root


def html_pages(site: Path) -> list[Path]:
    """Every HTML page of a built site."""
    return sorted(site.rglob("*.html"))


# -- notebook outputs ---------------------------------------------------------------------

STDERR_MIME = "application/vnd.jupyter.stderr"
# IPython starts the traceback of an exception a cell raised with a rule of dashes and
# the exception's name; the rule is no part of what a program prints on purpose.
_IPYTHON_TRACEBACK = re.compile(r"^-{20,}\s*\n\s*\w*(?:Error|Exception|Exit|Interrupt)\b", re.M)


def is_error_output(mime: str, text: str) -> bool:
    """Whether a notebook output with this MIME type and text shows an error (see below)."""
    return mime == STDERR_MIME or bool(_IPYTHON_TRACEBACK.search(text))


def error_outputs(html: Node) -> list[str]:
    """The text of every output a rendered notebook shows as an error.

    nbconvert renders a cell's exception (``output_type: "error"``) and text written to
    stderr as an output area with ``data-mime-type`` ``application/vnd.jupyter.stderr``;
    an exception's traceback also starts with IPython's rule of dashes. Text a cell
    prints to stdout is ``text/plain`` and is not an error even when it quotes a
    traceback, as the audit-loop notebook does when it shows a verify command's
    captured output as evidence.
    """
    found = []
    for node in html.find_all("div", "jp-OutputArea-output"):
        text = node.text()
        if is_error_output(node.attrs.get("data-mime-type", ""), text):
            found.append(text)
    return found
