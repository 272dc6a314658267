"""The reader's tools in the built site: source and edit links, Markdown copies, llms.txt.

Also the smaller defects a reader met (issue 22, item 11): a sitemap fetched where none
is, two summaries in a row on API pages, English labels on the Chinese CLI page, and a
notebook printing raw JSON Lines. What the browser does with these is checked in
``test_docs_browser.py``.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml
from docs_support import LANGUAGES, ROOT, BuiltSite, Node, parse_html

pytestmark = pytest.mark.slow


@cache
def config() -> dict[str, str]:
    """``repo_url``, ``site_url`` and ``edit_uri`` from ``mkdocs.yml`` (its tags unread)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    keys = ("repo_url", "site_url", "edit_uri")
    found = {k: v for k, v in re.findall(r"^(\w+): *(\S+)$", text, re.M) if k in keys}
    assert set(found) == set(keys), found
    return {k: yaml.safe_load(v) for k, v in found.items()}


@cache
def tracked_files() -> frozenset[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    )
    return frozenset(out.stdout.splitlines())


def head_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def pages(site: BuiltSite) -> list[Path]:
    """Every page of both languages (the 404 page is no page of the navigation)."""
    return [p for p in sorted(site.root.rglob("index.html")) if "assets" not in p.parts]


def api_pages(site: BuiltSite) -> list[Path]:
    return [p for p in pages(site) if "/reference/api/" in p.as_posix()]


def article(page: Path) -> Node:
    found = parse_html(page).find_all("article")
    assert found, page
    return found[0]


def test_no_page_head_lists_per_page_alternates(built_site: BuiltSite) -> None:
    """No page head has hreflang links (Material fetches a sitemap.xml next to each, a 404)."""
    offenders = []
    for page in pages(built_site):
        head = parse_html(page).find_all("head")[0]
        if any(
            link.attrs.get("rel") == "alternate" and "hreflang" in link.attrs
            for link in head.find_all("link")
        ):
            offenders.append(page.relative_to(built_site.root).as_posix())
    assert offenders == []


def test_sitemap_carries_the_language_alternates_of_every_page(built_site: BuiltSite) -> None:
    """/sitemap.xml names, for every page, its page in each language (hreflang)."""
    text = (built_site.root / "sitemap.xml").read_text(encoding="utf-8")
    entries = re.findall(r"<url>(.*?)</url>", text, re.S)
    site_url = config()["site_url"]
    by_loc = {
        re.search(r"<loc>(.*?)</loc>", e).group(1): re.findall(  # type: ignore[union-attr]
            r'hreflang="(\w+)" href="([^"]+)"', e
        )
        for e in entries
    }
    english = [
        p
        for p in pages(built_site)
        if not p.relative_to(built_site.root).as_posix().startswith("zh/")
        and (built_site.root / "zh" / p.relative_to(built_site.root)).is_file()
    ]
    assert len(english) >= 40
    lacking = []
    for page in english:
        rel = page.parent.relative_to(built_site.root).as_posix()
        loc = site_url + ("" if rel == "." else rel + "/")
        langs = {lang for lang, _ in by_loc.get(loc, [])}
        if langs != set(LANGUAGES):
            lacking.append(f"{loc}: {sorted(langs)}")
    assert lacking == []


_SOURCE = re.compile(
    r"^(?P<repo>.+)/blob/(?P<commit>[0-9a-f]{40})/(?P<file>src/[\w/.]+\.py)"
    r"(?:#L(?P<start>\d+)(?:-L(?P<end>\d+))?)?$"
)


def test_every_api_entry_links_to_its_definition(built_site: BuiltSite) -> None:
    """Each API entry links to the file and line that define it, at the commit built."""
    commit, repo = head_commit(), config()["repo_url"]
    wrong: list[str] = []
    entries = 0
    for page in api_pages(built_site):
        for heading in article(page).iter():
            classes = heading.classes
            ident = heading.attrs.get("id", "")
            if "doc-heading" not in classes or not ident.startswith("steadyloop"):
                continue
            entries += 1
            links = [a for a in heading.find_all("a") if "steadyloop-source-link" in a.classes]
            if len(links) != 1:
                wrong.append(f"{ident}: {len(links)} source links")
                continue
            match = _SOURCE.match(links[0].attrs["href"])
            if not match or match["repo"] != repo or match["commit"] != commit:
                wrong.append(f"{ident}: {links[0].attrs['href']}")
                continue
            if match["file"] not in tracked_files():
                wrong.append(f"{ident}: {match['file']} is not in the repository")
                continue
            if match["start"] is None:
                continue
            lines = (ROOT / match["file"]).read_text(encoding="utf-8").splitlines()
            end = int(match["end"] or match["start"])
            defined = "\n".join(lines[int(match["start"]) - 1 : end])
            name = ident.rsplit(".", 1)[-1]
            if not re.search(rf"\b{re.escape(name)}\b", defined):
                wrong.append(f"{ident}: {match['file']} lines {match['start']}-{end} lack it")
    assert entries >= 500, entries
    assert wrong == [], "\n".join(wrong[:20])


def _module_summaries() -> dict[str, str]:
    import griffe

    package = griffe.load("steadyloop", search_paths=[str(ROOT / "src")])
    out = {}
    modules = ["journal", "records", "sessions", "loop", "audit", "replay"]
    for name in [*modules, "effects", "integrations", "testing", "faults"]:
        doc = package[name].docstring
        assert doc is not None, name
        out[name] = " ".join(doc.value.split("\n\n", 1)[0].split())
    return out


@pytest.mark.parametrize("lang", LANGUAGES)
def test_api_pages_open_with_one_summary(built_site: BuiltSite, lang: str) -> None:
    """An API page says what its module is once: its docstring's summary is not repeated."""
    repeated = []
    for module, summary in _module_summaries().items():
        text = " ".join(article(built_site.page(lang, f"reference/api/{module}")).text().split())
        if summary in text:
            repeated.append(f"{module}: {summary!r}")
    assert repeated == []


def test_the_chinese_cli_page_labels_its_parts_in_chinese(built_site: BuiltSite) -> None:
    """The zh CLI reference labels usage, arguments, options and commands in Chinese."""
    zh = article(built_site.page("zh", "reference/cli")).text()
    en = article(built_site.page("en", "reference/cli")).text()
    for english, chinese in (
        ("Usage:", "用法："),
        ("Arguments:", "参数："),
        ("Options:", "选项："),
        ("Commands:", "子命令："),
    ):
        assert english in en and english not in zh, english
        assert zh.count(chinese) == en.count(english), chinese


def test_no_notebook_prints_raw_json_lines(built_site: BuiltSite) -> None:
    """No notebook output shows two JSON objects in a row, one a line (raw JSONL)."""
    found = []
    for page in pages(built_site):
        if "/notebooks/" not in page.as_posix():
            continue
        for out in parse_html(page).find_all("div", "jp-OutputArea-output"):
            lines = [line.strip() for line in out.text().splitlines() if line.strip()]
            for a, b in itertools.pairwise(lines):
                if _is_json_object(a) and _is_json_object(b):
                    found.append(f"{page.relative_to(built_site.root)}: {a[:80]}")
                    break
    assert found == []


def _is_json_object(line: str) -> bool:
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def test_edit_links_open_files_the_repository_has(built_site: BuiltSite) -> None:
    """Every page's "Edit this page" opens its source file in the repository."""
    prefix = config()["repo_url"] + "/" + config()["edit_uri"].removesuffix("docs/")
    wrong = []
    for page in pages(built_site):
        rel = page.relative_to(built_site.root).as_posix()
        edits = [a for a in parse_html(page).find_all("a") if a.attrs.get("rel") == "edit"]
        if len(edits) != 1:
            wrong.append(f"{rel}: {len(edits)} edit links")
            continue
        href = edits[0].attrs["href"]
        if not href.startswith(prefix) or href.removeprefix(prefix) not in tracked_files():
            wrong.append(f"{rel}: {href}")
    assert wrong == []


_MARKUP = re.compile(r"[`*_\[\]()#>|!\\]")


def _words(text: str) -> list[str]:
    # Chinese by character: a link's markup may split what the page shows as one run.
    return re.findall(r"[A-Za-z]{4,}|[\u4e00-\u9fff]", _MARKUP.sub(" ", text))


def test_every_page_has_a_markdown_copy_holding_its_text(built_site: BuiltSite) -> None:
    """Next to each page is index.md: its title, and the words of its first paragraphs."""
    lacking = []
    for page in pages(built_site):
        rel = page.relative_to(built_site.root).as_posix()
        copy = page.with_name("index.md")
        if not copy.is_file():
            lacking.append(f"{rel}: no index.md")
            continue
        text = copy.read_text(encoding="utf-8")
        body = article(page)
        h1 = body.find_all("h1")
        title = h1[0].text().replace("¶", "").strip() if h1 else ""
        if title and not set(_words(title)) <= set(_words(text)):
            lacking.append(f"{rel}: title {title!r}")
        prose = [
            p.text()
            for p in body.find_all("p")
            if not any("jp-OutputArea" in a.attrs.get("class", "") for a in _ancestors(p))
        ][:5]
        words = [w for p in prose for w in _words(p)]
        have = set(_words(text))
        missing = [w for w in words if w not in have]
        if words and len(missing) > len(words) // 10:
            lacking.append(f"{rel}: {len(missing)} of {len(words)} words missing: {missing[:8]}")
    assert lacking == [], "\n".join(lacking[:20])


def _ancestors(node: Node) -> list[Node]:
    out = []
    parent = node.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


@pytest.mark.parametrize("lang", LANGUAGES)
def test_llms_txt_lists_every_page_of_its_language(built_site: BuiltSite, lang: str) -> None:
    """llms.txt (per language) links the Markdown copy of every page of that language."""
    base = built_site.root if lang == "en" else built_site.root / lang
    text = (base / "llms.txt").read_text(encoding="utf-8")
    assert text.startswith("# Steadyloop\n\n> "), text[:80]
    site_url = config()["site_url"]
    linked = re.findall(r"^- \[[^\]]+\]\((\S+)\)", text, re.M)
    targets = set()
    for url in linked:
        assert url.startswith(site_url) and url.endswith("/index.md"), url
        path = built_site.root / url.removeprefix(site_url)
        assert path.is_file(), url
        targets.add(path)
    expected = {
        p.with_name("index.md")
        for p in pages(built_site)
        if (p.relative_to(built_site.root).as_posix().startswith("zh/")) == (lang == "zh")
    }
    assert expected - targets == set(), sorted(str(p) for p in expected - targets)
    assert len(targets) >= 40


TABBED = {
    "tutorials/getting-started": ["uv", "pip"],
    "how-to/server-backends": ["uv", "pip", "SQLite", "PostgreSQL", "Redis", "MySQL"],
    "how-to/replay-policies": None,  # sync / async, in each language's words
}


@pytest.mark.parametrize("page", list(TABBED))
def test_pages_with_a_choice_offer_it_as_tabs(built_site: BuiltSite, page: str) -> None:
    """Where a reader chooses (uv/pip, SQLite/PostgreSQL, sync/async), both languages tab it."""
    found = {}
    for lang in LANGUAGES:
        html = article(built_site.page(lang, page))
        labels = [
            label.text().strip()
            for tabs in html.find_all("div", "tabbed-set")
            for label in tabs.find_all("label")
        ]
        blocks = [len(t.find_all("pre")) for t in html.find_all("div", "tabbed-set")]
        assert labels, f"{lang}/{page}: no tabs"
        assert all(n >= 2 for n in blocks), f"{lang}/{page}: a tab set without two blocks"
        found[lang] = labels
    if TABBED[page] is not None:
        assert found["en"] == found["zh"] == TABBED[page]
    else:
        assert len(found["en"]) == len(found["zh"]) == 2
