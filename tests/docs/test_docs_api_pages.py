"""The Python API pages document each public name once, in order, and render as written.

The source checks hold the pages to the code: every name a package exports appears on
its page exactly once, and the index lists every name of ``steadyloop.__all__`` with a
link to that entry, so neither can drift from ``__all__``. The built-site checks parse
the HTML of every API page in both languages and fail on what mkdocstrings prints when
a docstring is not written the way it renders: a literal Sphinx role, a docstring
section shown as a quote, or a cross-reference left unresolved.
"""

from __future__ import annotations

import importlib
import re

import api_pages
import pytest
from docs_support import DOCS, LANGUAGES, BuiltSite, Node, parse_html

import steadyloop
import steadyloop._errors

API = "reference/api"
PACKAGES = ("records", "journal", "sessions", "loop", "audit", "replay", "integrations", "testing")
PAGES = (*PACKAGES, "errors", "index")

_DIRECTIVE = re.compile(r"^::: (?P<path>[\w.]+)\s*$", re.M)
_XREF = re.compile(r"\[`(?P<name>\w+)`\]\[(?P<target>[\w.]+)\]")
# A role prints as ":class:" followed by the name, in code or not.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|py:\w+):(?=[`\w~])")
# What autorefs leaves behind when it cannot resolve ``[title][identifier]``.
_UNRESOLVED = re.compile(r"\]\[steadyloop[\w.]*\]|<autoref\b")


REGENERATE = "run `uv run python tests/docs/api_pages.py` (and place new names in its groups)"


def test_api_pages_are_generated_from_the_code() -> None:
    """The committed API pages are exactly what tests/docs/api_pages.py writes today."""
    stale = [
        rel.as_posix()
        for rel, text in api_pages.pages().items()
        if not (DOCS / rel).exists() or (DOCS / rel).read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date: {stale}; {REGENERATE}"


def _source(lang: str, page: str) -> str:
    return (DOCS / lang / API / f"{page}.md").read_text(encoding="utf-8")


def _documented(lang: str, page: str) -> list[str]:
    """The objects a page renders, one ``::: path`` directive each, in page order."""
    return [m["path"] for m in _DIRECTIVE.finditer(_source(lang, page))]


def _all_documented(lang: str) -> set[str]:
    return {path for page in PAGES for path in _documented(lang, page)}


def _submodule_export(package: str, member: str) -> bool:
    """Whether ``member`` (``"langgraph.LangGraphGuard"``) is exported by a public submodule."""
    module_name, _, name = member.rpartition(".")
    if not module_name or module_name.startswith("_"):
        return False
    module = importlib.import_module(f"steadyloop.{package}.{module_name}")
    return name in getattr(module, "__all__", ())


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("package", PACKAGES)
def test_package_page_documents_each_export_once(lang: str, package: str) -> None:
    """A package page renders every name of the package's ``__all__`` exactly once."""
    module = importlib.import_module(f"steadyloop.{package}")
    paths = _documented(lang, package)
    members = [p.removeprefix(f"steadyloop.{package}.") for p in paths[1:]]
    assert paths[0] == f"steadyloop.{package}", "the page opens with the package docstring"
    repeated = sorted({m for m in members if members.count(m) > 1})
    assert not repeated, f"{package}.md renders {repeated} more than once"
    missing = sorted(set(module.__all__) - set(members))
    extra = sorted(
        m for m in set(members) - set(module.__all__) if not _submodule_export(package, m)
    )
    assert not missing, f"steadyloop.{package} exports {missing}: {REGENERATE}"
    assert not extra, f"{package}.md renders {extra}, which steadyloop.{package} does not export"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_journal_page_puts_the_contract_before_backend_helpers(lang: str) -> None:
    """The journal page opens with the protocol; the file helpers for backend authors come last."""
    members = [p.rsplit(".", 1)[1] for p in _documented(lang, "journal")[1:]]
    assert members[0] == "Journal"
    for helper in ("FileLock", "Files", "fsync_directory", "namespace_filename"):
        assert members.index(helper) > members.index("open_journal")
        assert members.index(helper) > members.index("SQLiteJournal")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_errors_page_documents_every_error(lang: str) -> None:
    """The errors page renders every class of ``steadyloop._errors.__all__``, once each."""
    names = [p.removeprefix("steadyloop.") for p in _documented(lang, "errors")]
    missing = sorted(set(steadyloop._errors.__all__) - set(names))
    assert not missing, f"errors.md lacks {missing}: {REGENERATE}"
    assert sorted(names) == sorted(steadyloop._errors.__all__)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_index_lists_every_export_with_a_link_to_its_entry(lang: str) -> None:
    """The index is a table of every top-level name, each linking to a rendered entry."""
    text = _source(lang, "index")
    assert not _DIRECTIVE.search(text), "the index links to entries; it renders none itself"
    rows = [
        m for line in text.splitlines() if line.startswith("| [`") if (m := _XREF.match(line[2:]))
    ]
    names = [m["name"] for m in rows]
    expected = sorted(n for n in steadyloop.__all__ if n != "__version__")
    assert sorted(names) == expected, (
        f"index.md lacks {sorted(set(expected) - set(names))} and has extra "
        f"{sorted(set(names) - set(expected))} compared with steadyloop.__all__: {REGENERATE}"
    )
    rendered = _all_documented(lang)
    for m in rows:
        assert m["target"] in rendered, f"{m['name']} links to {m['target']}, which no page renders"
        assert m["target"].rsplit(".", 1)[1] == m["name"]
        module = importlib.import_module(m["target"].rsplit(".", 1)[0])
        assert getattr(module, m["name"]) is getattr(steadyloop, m["name"])


# -- the built pages -----------------------------------------------------------------------


def _doc_blocks(html: Node) -> list[Node]:
    return [n for n in html.find_all("div") if "doc-contents" in n.classes]


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", PAGES)
def test_built_api_page_renders_docstrings(built_site: BuiltSite, lang: str, page: str) -> None:
    """No literal role, no section shown as a quote, no unresolved cross-reference."""
    path = built_site.page(lang, f"{API}/{page}" if page != "index" else API)
    raw = path.read_text(encoding="utf-8")
    html = parse_html(path)
    article = html.find_all("article")[0]
    text = article.text()
    roles = sorted(set(_ROLE.findall(text)))
    assert not roles, f"{path}: Sphinx roles printed literally: {roles}"
    left = sorted(set(_UNRESOLVED.findall(raw)))
    assert not left, f"{path}: unresolved cross-references: {left}"
    for block in _doc_blocks(article):
        quotes = block.find_all("blockquote")
        assert not quotes, (
            f"{path}: a docstring section rendered as a quote: {quotes[0].text()[:80]!r}"
        )
        examples = [d for d in block.find_all("details") if "example" in d.classes]
        assert not examples, f"{path}: an 'Example:' section rendered as prose (write Examples:)"
    ids = {n.attrs["id"] for n in article.iter() if "id" in n.attrs}
    for target in _documented(lang, page) if page != "index" else []:
        if target.count(".") > 1 or page == "errors":
            assert target in ids, f"{path}: {target} is not rendered"
    if page == "index":
        links = [a.attrs.get("href", "") for a in article.find_all("a")]
        entries = [h for h in links if "#steadyloop." in h]
        assert len(entries) >= len(steadyloop.__all__) - 1, "the index links to every entry"
