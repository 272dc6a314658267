"""The built site, checked in its HTML rather than by the build's exit code."""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

import pytest
from docs_support import (
    DEFAULT_LANGUAGE,
    DOCS,
    LANGUAGES,
    NOTEBOOKS,
    SITE_PREFIX,
    BuiltSite,
    Node,
    error_outputs,
    html_pages,
    markdown_pages,
    notebook_pages,
    page_url,
    parse_html,
)

pytestmark = pytest.mark.slow

SITE_HOST = "steadyloop.github.io"


def all_pages(lang: str) -> list[str]:
    return [page_url(p) for p in markdown_pages(lang) + notebook_pages(lang)]


# -- the build ------------------------------------------------------------------------


def test_strict_build_is_clean(
    built_site: BuiltSite, record_property: pytest.RecordProperty
) -> None:
    """The strict build of both languages logs no warning (its times are recorded, not judged).

    How fast it is, and each notebook's execution, is measured by ``benchmarks/bench_docs.py``.
    """
    record_property("docs_build_seconds", round(built_site.seconds, 2))
    record_property("notebook_seconds", round(built_site.notebook_seconds, 2))
    warnings = [line for line in built_site.log.splitlines() if line.startswith("WARNING")]
    assert warnings == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_source_page_is_built(built_site: BuiltSite, lang: str) -> None:
    """Each Markdown page and each notebook of a language becomes a page of that language."""
    for rel in all_pages(lang):
        page = built_site.page(lang, rel)
        assert page.is_file(), f"{lang}: no page for {rel!r}"
        html = parse_html(page)
        expected = "zh" if lang == "zh" else "en"
        assert html.find_all("html")[0].attrs.get("lang") == expected, page


# -- notebooks ------------------------------------------------------------------------


def notebook_cases() -> list[tuple[str, str]]:
    return [(lang, nb) for lang in LANGUAGES for nb in notebook_pages(lang)]


@pytest.mark.parametrize(("lang", "notebook"), notebook_cases())
def test_notebook_page_renders_with_executed_outputs(
    built_site: BuiltSite, lang: str, notebook: str
) -> None:
    """A notebook page is HTML with every code cell executed and no error output.

    With mkdocs-static-i18n, a notebook can silently end up as its raw JSON text
    (DOCS-NOTES trap 1); this is what catches it.
    """
    page = built_site.page(lang, page_url(notebook))
    text = page.read_text(encoding="utf-8")
    assert '"nbformat"' not in text and '"cell_type"' not in text, "raw notebook JSON on the page"
    html = parse_html(page)
    source = json.loads((DOCS / lang / notebook).read_text(encoding="utf-8"))
    code_cells = [c for c in source["cells"] if c["cell_type"] == "code"]

    # nbconvert wraps each cell in a second div of the same classes; the inner one has the id.
    rendered = [c for c in html.find_all("div", "jp-CodeCell") if "id" in c.attrs]
    assert len(rendered) == len(code_cells)
    for number, cell in enumerate(rendered, start=1):
        prompt = cell.find_all("div", "jp-InputPrompt")
        assert prompt and f"[{number}]" in prompt[0].text(), "a code cell was not executed"
    outputs = [o for o in html.find_all("div", "jp-OutputArea-output") if o.text().strip()]
    assert outputs, "the notebook produced no output"
    # Error outputs and stderr, not stdout text that quotes a traceback as evidence.
    errors = error_outputs(html)
    assert errors == [], f"error output: {errors[0][:300]}"

    # The language's own notebook, not a fallback from another language.
    first_markdown = next(c for c in source["cells"] if c["cell_type"] == "markdown")
    title = "".join(first_markdown["source"]).splitlines()[0].lstrip("# ").strip()
    assert title in html.find_all("article")[0].text()


@pytest.mark.parametrize(("lang", "notebook"), notebook_cases())
def test_notebook_page_offers_its_source_for_download(
    built_site: BuiltSite, lang: str, notebook: str
) -> None:
    """The page links the .ipynb it was made from, and that file is published beside it."""
    page = built_site.page(lang, page_url(notebook))
    links = parse_html(page).find_all("a", "steadyloop-download-notebook")
    assert len(links) == 1
    target, _ = resolve(built_site.root, page, links[0].attrs["href"])
    assert target is not None and target.is_file()
    original = (DOCS / lang / notebook).resolve()
    assert original.is_relative_to(NOTEBOOKS / lang)
    assert target.read_bytes() == original.read_bytes()


@pytest.mark.parametrize(("lang", "notebook"), notebook_cases())
def test_notebook_toc_links_point_at_headings(
    built_site: BuiltSite, lang: str, notebook: str
) -> None:
    """Chinese notebook headings get real ids, so their TOC entries work (DOCS-NOTES trap 8)."""
    page = built_site.page(lang, page_url(notebook))
    html = parse_html(page)
    ids = {n.attrs["id"] for n in html.iter() if "id" in n.attrs}
    assert "" not in ids, "a heading without an id"
    toc = [a.attrs.get("href", "") for a in html.find_all("a", "md-nav__link")]
    anchors = [h for h in toc if h.startswith("#")]
    assert anchors, "the notebook page has no table of contents"
    for href in anchors:
        assert href != "#" and unquote(href[1:]) in ids, href


@pytest.mark.parametrize(("lang", "notebook"), notebook_cases())
def test_notebook_toc_keeps_inline_code(built_site: BuiltSite, lang: str, notebook: str) -> None:
    """Each TOC entry of a notebook page reads as its heading, inline code included."""
    html = parse_html(built_site.page(lang, page_url(notebook)))
    headings = {
        n.attrs["id"]: " ".join(n.text().replace("\u00b6", "").split())
        for n in html.iter()
        if n.tag in {"h2", "h3", "h4", "h5", "h6"} and n.attrs.get("id")
    }
    entries = [
        (unquote(a.attrs["href"][1:]), " ".join(a.text().split()))
        for a in html.find_all("a", "md-nav__link")
        if a.attrs.get("href", "").startswith("#")
    ]
    assert entries, "the notebook page has no table of contents"
    wrong = [
        (title, headings.get(anchor)) for anchor, title in entries if title != headings.get(anchor)
    ]
    assert wrong == [], f"TOC entries that are not their heading's text: {wrong}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_divergence_table_shows_whole_values(built_site: BuiltSite, lang: str) -> None:
    """framework_stores' divergence table: few columns, whole values, no empty code chips."""
    html = parse_html(built_site.page(lang, "tutorials/notebooks/framework_stores"))
    tables = [t for t in html.find_all("table") if "steadyloop-divergences" in t.classes]
    assert len(tables) == 1, "no divergence table"
    header = [th.text().strip() for th in tables[0].find_all("th")]
    assert header[0] == "store" and len(header) <= 5, header
    cells = tables[0].find_all("td")
    assert cells, "the divergence table has no rows"
    codes = [c.text() for c in tables[0].find_all("code")]
    assert all(c.strip() for c in codes), "an empty code chip in the divergence table"
    assert not any(c.endswith("…") for c in codes), "a value cut short in the divergence table"


# The design page of each scenario, and the notebook it must lead to in one click.
DESIGN_NOTEBOOKS = [
    ("explanation/crash-resume.md", "crash_resume.ipynb"),
    ("explanation/audit-loop.md", "audit_loop.ipynb"),
    ("explanation/replay-diff.md", "replay_diff.ipynb"),
]


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize(("design", "notebook"), DESIGN_NOTEBOOKS)
def test_design_page_leads_to_its_notebook(
    built_site: BuiltSite, lang: str, design: str, notebook: str
) -> None:
    """A design page links its notebook's page and its .ipynb, both in the page's language."""
    page = built_site.page(lang, page_url(design))
    html = parse_html(page)
    notebook_page = built_site.page(lang, page_url(f"tutorials/notebooks/{notebook}"))
    targets = {
        resolve(built_site.root, page, a.attrs.get("href", ""))[0] for a in html.find_all("a")
    }
    assert notebook_page in targets, "no link to the notebook's page"
    downloads = html.find_all("a", "steadyloop-notebook-download")
    assert len(downloads) == 1 and "download" in downloads[0].attrs
    target, _ = resolve(built_site.root, page, downloads[0].attrs["href"])
    assert target is not None and target.is_file()
    assert target.read_bytes() == (NOTEBOOKS / lang / notebook).read_bytes()


# -- language switch ------------------------------------------------------------------


def counterpart(lang: str) -> str:
    return next(other for other in LANGUAGES if other != lang)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_language_switch_lands_on_the_counterpart(built_site: BuiltSite, lang: str) -> None:
    """On every page, the switch to the other language leads to the same page in it."""
    other = counterpart(lang)
    for rel in all_pages(lang):
        page = built_site.page(lang, rel)
        switches = [
            a
            for a in parse_html(page).find_all("a", "md-select__link")
            if a.attrs.get("hreflang") == other
        ]
        assert len(switches) == 1, f"{page}: no single switch to {other}"
        target, _ = resolve(built_site.root, page, switches[0].attrs["href"])
        assert target == built_site.page(other, rel), f"{lang}/{rel} switches to {target}"


def section_ids(page: Path) -> list[str]:
    """The ids of a page's section headings (h2 to h6) in its article, in order."""
    article = parse_html(page).find_all("article")
    assert article, f"{page}: no article"
    return [
        n.attrs["id"]
        for n in article[0].iter()
        if n.tag in {"h2", "h3", "h4", "h5", "h6"} and n.attrs.get("id")
    ]


def test_every_page_pair_shares_its_section_ids(built_site: BuiltSite) -> None:
    """Each page and its other-language counterpart carry the same section ids, in order.

    The language switch keeps the ``#anchor`` (site.js); it lands on the same section
    only when both pages name their sections alike, notebooks included.
    """
    differ = []
    for rel in all_pages(DEFAULT_LANGUAGE):
        ids = {lang: section_ids(built_site.page(lang, rel)) for lang in LANGUAGES}
        en, zh = ids[DEFAULT_LANGUAGE], ids[counterpart(DEFAULT_LANGUAGE)]
        if en != zh:
            only = [i for i in en if i not in zh][:3]
            differ.append(f"{rel or '(home)'}: {len(en)} vs {len(zh)} ids; en only: {only}")
    assert differ == [], "pages whose sections the language switch cannot find:\n" + "\n".join(
        differ
    )


# -- links and anchors ----------------------------------------------------------------


def resolve(site: Path, page: Path, url: str) -> tuple[Path | None, str]:
    """Map a link on ``page`` to a file of the site and a fragment.

    Returns ``(None, "")`` for links that leave the site.
    """
    parts = urlsplit(url)
    if parts.scheme in ("mailto", "javascript", "data", "tel"):
        return None, ""
    if parts.scheme or parts.netloc:
        if parts.netloc != SITE_HOST:
            return None, ""
        path = parts.path
    else:
        path = parts.path
    fragment = unquote(parts.fragment)
    if path.startswith("/"):
        assert path.startswith(SITE_PREFIX), f"{page}: absolute link {url!r} outside the site"
        target = site / unquote(path[len(SITE_PREFIX) :])
    elif path == "":
        target = page
    else:
        target = page.parent / unquote(path)
    target = Path(*PurePosixPath(target.as_posix()).parts)
    target = target.resolve() if target.exists() else Path(_normalise(target.as_posix()))
    if target.is_dir():
        target = target / "index.html"
    return target, fragment


def _normalise(path: str) -> str:
    out: list[str] = []
    for part in path.split("/"):
        if part == "..":
            if out:
                out.pop()
        elif part not in ("", "."):
            out.append(part)
    return "/" + "/".join(out)


_LINK_ATTRS = {"a": "href", "link": "href", "script": "src", "img": "src", "source": "src"}


def _links(html: Node) -> list[tuple[str, str]]:
    found = []
    for node in html.iter():
        attr = _LINK_ATTRS.get(node.tag)
        if attr and attr in node.attrs:
            found.append((node.tag, node.attrs[attr]))
    return found


def test_no_broken_internal_link_or_anchor(built_site: BuiltSite) -> None:
    """Every internal link of every page reaches a file, and every anchor an element id."""
    site = built_site.root.resolve()
    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            nodes = parse_html(path).iter()
            ids[path] = {n.attrs[k] for n in nodes for k in ("id", "name") if k in n.attrs}
        return ids[path]

    broken: list[str] = []
    pages = [p.resolve() for p in html_pages(site)]
    assert len(pages) >= 2 * len(all_pages(DEFAULT_LANGUAGE))
    for page in pages:
        for tag, url in _links(parse_html(page)):
            target, fragment = resolve(site, page, url)
            if target is None:
                continue
            where = f"{page.relative_to(site)}: <{tag}> {url!r}"
            if not target.is_file():
                broken.append(f"{where} -> missing {target}")
            elif fragment and target.suffix == ".html" and fragment not in ids_of(target):
                broken.append(f"{where} -> no element with id {fragment!r}")
    assert broken == []


# -- search ---------------------------------------------------------------------------

# A query word from each Chinese design page; each must be a word jieba cuts out.
CHINESE_QUERIES = [
    ("explanation/journal.md", "幂等"),
    ("explanation/journal.md", "损坏"),
    ("explanation/architecture.md", "意图"),
    ("explanation/backends.md", "断电"),
    ("tutorials/getting-started.md", "笔记本"),
    ("explanation/neighbours.md", "确定性"),
    ("how-to/write-a-backend.md", "一致性"),
    ("how-to/server-backends.md", "持久化"),
    ("explanation/crash-resume.md", "崩溃"),
    ("explanation/audit-loop.md", "审计"),
    ("explanation/replay-diff.md", "规范化"),
    ("how-to/write-a-replay-case.md", "用例"),
    ("how-to/replay-policies.md", "策略"),
    ("how-to/workers-on-several-machines.md", "租约"),
]

_TAGS = re.compile(r"<[^>]+>")


def tokenise(text: str, separator: re.Pattern[str]) -> set[str]:
    """Split index text as the search client does: on the configured separator, lowercased."""
    return {t.lower() for t in separator.split(_TAGS.sub(" ", text)) if t}


_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def segment_query(query: str, terms: set[str]) -> set[str]:
    """Split a Chinese query into index terms, as the site's search worker does.

    A port of the segmenter ``hooks/search_per_language.py`` puts into Material's worker:
    each run of Han characters is cut from the left into the longest pieces some term
    of the index starts with; characters no term starts with stay together as one
    piece. Each resulting piece is then searched as a prefix.
    """
    ordered = sorted(terms)

    def begins(text: str) -> bool:
        at = bisect.bisect_left(ordered, text)
        return at < len(ordered) and ordered[at].startswith(text)

    found: set[str] = set()
    for run in _HAN_RUN.findall(query):
        rest, i = "", 0
        while i < len(run):
            n = len(run) - i
            while n > 0 and not begins(run[i : i + n]):
                n -= 1
            if n == 0:
                rest += run[i]
                i += 1
                continue
            if rest:
                found.add(rest)
                rest = ""
            found.add(run[i : i + n])
            i += n
        if rest:
            found.add(rest)
    found.update(t for t in _HAN_RUN.sub(" ", query).split() if t)
    return found


@pytest.fixture(scope="module")
def search_index(built_site: BuiltSite) -> dict[str, object]:
    """The Chinese pages' own index (hooks/search_per_language.py)."""
    data: dict[str, object] = json.loads(
        (built_site.root / "zh" / "search" / "search_index.json").read_text(encoding="utf-8")
    )
    return data


def test_search_is_configured_for_chinese(search_index: dict[str, object]) -> None:
    """The Chinese index is built for Chinese (and English identifiers), split on jieba's marks."""
    config = search_index["config"]
    assert isinstance(config, dict)
    assert {"en", "zh"} <= set(config["lang"])
    assert "\\u200b" in config["separator"] or "\u200b" in config["separator"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_each_language_has_its_own_search_index(built_site: BuiltSite, lang: str) -> None:
    """A language's index lists its own pages only, each of them, relative to its root."""
    base = built_site.root if lang == DEFAULT_LANGUAGE else built_site.root / lang
    index = json.loads((base / "search" / "search_index.json").read_text(encoding="utf-8"))
    pages = {d["location"].split("#", 1)[0] for d in index["docs"]}
    expected = {f"{u}/" if u else "" for u in all_pages(lang)}
    assert expected <= pages, f"pages missing from the {lang} index: {sorted(expected - pages)}"
    assert not any(p.startswith(tuple(f"{o}/" for o in LANGUAGES)) for p in pages), (
        f"the {lang} index lists another language's pages"
    )


def test_chinese_index_keeps_the_entries_written_in_english(built_site: BuiltSite) -> None:
    """API objects and CLI entries, whose text is English in both languages, are in both indexes."""
    indexes = {
        lang: json.loads(
            (
                (built_site.root / lang if lang != DEFAULT_LANGUAGE else built_site.root)
                / "search"
                / "search_index.json"
            ).read_text(encoding="utf-8")
        )
        for lang in LANGUAGES
    }
    locations = {lang: {d["location"] for d in index["docs"]} for lang, index in indexes.items()}
    english = {
        loc
        for loc in locations[DEFAULT_LANGUAGE]
        if loc.startswith(("reference/api/", "reference/cli/"))
    }
    assert len(english) > 100
    lacking = sorted(english - locations["zh"])
    assert lacking == [], f"{len(lacking)} of {len(english)} entries missing in zh: {lacking[:5]}"


def test_chinese_index_ships_its_terms(search_index: dict[str, object]) -> None:
    """The zh index carries the Han words it was cut into, glossary terms whole, for the query side."""
    config = search_index["config"]
    assert isinstance(config, dict)
    terms = set(config["terms"])
    assert {"幂等键", "回放", "回放比对", "日志"} <= terms
    assert all(re.fullmatch(r"[\u3400-\u9fff\uf900-\ufaff]+", t) for t in terms)
    assert segment_query("幂等键", terms) == {"幂等键"}
    assert segment_query("回放", terms) == {"回放"}


@pytest.mark.parametrize(("source", "word"), CHINESE_QUERIES)
def test_chinese_query_finds_its_page(
    search_index: dict[str, object], source: str, word: str
) -> None:
    """A Chinese word from a Chinese page is a search term of that page in the index."""
    assert word in (DOCS / "zh" / source).read_text(encoding="utf-8")
    config = search_index["config"]
    assert isinstance(config, dict)
    separator = re.compile(config["separator"])
    docs = search_index["docs"]
    assert isinstance(docs, list)
    location = f"{page_url(source)}/"
    tokens: dict[str, set[str]] = {}
    for d in docs:
        page = d["location"].split("#", 1)[0]
        tokens.setdefault(page, set()).update(
            tokenise(d["title"], separator) | tokenise(d["text"], separator)
        )
    terms = segment_query(word, set(config["terms"]))
    hits = {
        page
        for page, words in tokens.items()
        if all(any(w.startswith(t) for w in words) for t in terms)
    }
    assert location in hits, f"{word!r} ({terms}) does not find {location}; found {sorted(hits)}"
    page_text = "".join(d["text"] for d in docs if d["location"].startswith(location))
    assert "\u200b" in page_text, "the Chinese page was not segmented into words"


# -- generated reference pages ----------------------------------------------------------


def _command_paths(command: object, path: list[str]) -> list[list[str]]:
    out = [path]
    lister = getattr(command, "list_commands", None)
    if lister is not None:
        ctx = command.context_class(command, info_name=path[-1])  # type: ignore[attr-defined]
        for name in lister(ctx):
            sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
            if sub is not None and not getattr(sub, "hidden", False):
                out.extend(_command_paths(sub, [*path, name]))
    return out


@pytest.mark.parametrize("lang", LANGUAGES)
def test_cli_reference_lists_every_command(built_site: BuiltSite, lang: str) -> None:
    """The CLI page is generated from the app: every command has its own section."""
    import typer.main

    from steadyloop.cli import app

    command = typer.main.get_command(app)
    html = parse_html(built_site.page(lang, "reference/cli"))
    ids = {n.attrs.get("id") for n in html.iter()}
    for path in _command_paths(command, ["steadyloop"]):
        assert "cli-" + "-".join(path) in ids, " ".join(path)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_api_reference_documents_the_public_api(built_site: BuiltSite, lang: str) -> None:
    """Every name of ``steadyloop.__all__`` links from the API index to its rendered entry."""
    import steadyloop

    index = built_site.page(lang, "reference/api")
    links = {a.text().strip(): a.attrs.get("href", "") for a in parse_html(index).find_all("a")}
    missing = []
    for name in steadyloop.__all__:
        if name.startswith("_"):
            continue
        page, _, anchor = links.get(name, "#").partition("#")
        target = (index.parent / page / "index.html").resolve()
        ids = {n.attrs.get("id") for n in parse_html(target).iter()} if target.is_file() else set()
        if not anchor or anchor not in ids:
            missing.append(name)
    assert missing == []


@pytest.mark.parametrize("lang", LANGUAGES)
def test_error_reference_shows_every_error(built_site: BuiltSite, lang: str) -> None:
    """The error tree is drawn from the code, so it names every error class there is."""
    from steadyloop import _errors

    text = parse_html(built_site.page(lang, "reference/errors")).text()
    missing = [name for name in _errors.__all__ if not re.search(rf"\b{name}\b", text)]
    assert missing == []
