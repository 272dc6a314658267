"""The built site as a reader sees it: every page of both languages in headless Chromium.

The site is served on loopback under the path it has on GitHub Pages and each page is
loaded in one tab of one Chromium (``browser_support.py``). A page is looked at once, at
1366 px and again at 390 px, and every problem found is recorded against it; each test
below then asserts that one kind of problem occurs on no page, and names the pages and
what is wrong. Without Chromium the tests are skipped, except under ``CI=true``, where
they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from browser_support import DevTools, find_chromium, serve
from docs_support import SITE_PREFIX, STDERR_MIME, BuiltSite, is_error_output

# The first test that needs the walk pays for the build and for looking at every page
# (about two minutes on a quiet machine, much more on a busy one).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
WIDTHS = (1366, 390)
HEIGHT = 900
DIAGRAM_SECONDS = 15


_OPEN_SHADOW_ROOTS = r"""
(() => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, Object.assign({}, init, {mode: "open"}));
  };
})();
"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    binary = find_chromium()
    if binary is None:
        message = "Chromium is not installed (apt-get install chromium)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    profile = tmp_path_factory.mktemp("chromium-profile")
    tools = DevTools(binary, profile)
    try:
        tools.call("Browser.getVersion", session=False, timeout=60)
        tools.open_tab()
        for domain in ("Page", "Runtime", "Network"):
            tools.call(f"{domain}.enable")
        # Material draws each diagram into a closed shadow root; open it, so the text
        # inside can be measured (nothing else about the page changes).
        tools.call("Page.addScriptToEvaluateOnNewDocument", {"source": _OPEN_SHADOW_ROOTS})
        yield tools
    finally:
        tools.close()


@pytest.fixture(scope="module")
def base_url(built_site: BuiltSite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve(built_site.root, tmp_path_factory.mktemp("www")) as base:
        yield base


def site_pages(site: Path) -> list[str]:
    """Every page of the built site (both languages), as paths below the site root."""
    pages = []
    for html in sorted(site.rglob("index.html")):
        rel = html.parent.relative_to(site).as_posix()
        pages.append("" if rel == "." else f"{rel}/")
    return pages


# What one page looks like, measured in the page. Diagrams: Material replaces each
# <pre class="mermaid"> with a <div class="mermaid"> holding the SVG once Mermaid has
# rendered it; a block Mermaid cannot parse stays a <pre> and Mermaid leaves a "Syntax
# error in text" drawing in the body.
_LOOK = r"""
(() => {
  const text = (el) => (el.innerText || el.textContent || "").trim();
  const content = document.querySelector(".md-content") || document.body;
  const out = {};
  out.pre_diagrams = [...document.querySelectorAll("pre > code")].map(e => text(e))
    .filter(t => /^(sequenceDiagram|flowchart|graph|stateDiagram|classDiagram|erDiagram|gantt)/.test(t))
    .map(t => t.slice(0, 60));
  out.rendered_diagrams = document.querySelectorAll("div.mermaid").length;
  out.diagram_errors = [...document.querySelectorAll("svg[aria-roledescription=error], [id^=d__mermaid]")]
    .filter(e => /syntax error|error in text/i.test(e.textContent || "")).length
    + (/Syntax error in text/.test(document.body.innerText) ? 1 : 0);
  out.notebook = !!document.querySelector(".jupyter-wrapper");
  out.code_cells = document.querySelectorAll(".jp-CodeCell").length;
  out.outputs = [...document.querySelectorAll(".jp-OutputArea-output")].map(e => ({
    mime: e.getAttribute("data-mime-type") || "", text: text(e).slice(0, 4000)}));
  out.unrendered_notebook_diagrams = document.querySelectorAll(".jp-Mermaid:not(.jp-RenderedMermaid)").length;
  out.text = text(content);
  // The same without code: a page may show the syntax of a cross-reference in code.
  const bare = content.cloneNode(true);
  bare.querySelectorAll("code, pre, kbd, style, script, .jp-InputArea, .jp-OutputArea").forEach(e => e.remove());
  out.prose = (bare.textContent || "").trim();
  out.blockquotes_in_docstrings = [...document.querySelectorAll(".doc-contents blockquote:not(blockquote blockquote)")]
    .map(e => text(e).slice(0, 80));
  out.autoref_tags = [...document.querySelectorAll("autoref")].map(e => text(e).slice(0, 60));
  return out;
})()
"""

# Whether the page as a whole scrolls sideways, and if so, which outermost elements
# stick out past the viewport without a scrolling box around them.
_SIDEWAYS = r"""
(() => {
  const doc = document.documentElement;
  const width = doc.clientWidth;
  if (doc.scrollWidth <= width + 1) return null;
  const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
    + [...e.classList].slice(0, 2).map(c => "." + c).join("");
  const clipped = (e) => {
    for (let p = e.parentElement; p && p !== doc; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o !== "visible") return true;
    }
    return false;
  };
  const out = [];
  for (const e of document.body.querySelectorAll("*")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 1 || clipped(e)) continue;
    if (getComputedStyle(e).position === "fixed") continue;
    if (out.some(o => o.el.contains(e))) continue;
    out.push({el: e, what: name(e) + " (right edge " + Math.round(r.right) + " px)"});
    if (out.length >= 3) break;
  }
  return {scroll_width: doc.scrollWidth, width, culprits: out.map(o => o.what)};
})()
"""

# The smallest text a reader sees in each diagram (Mermaid, in its shadow root) and each
# chart (an inline SVG figure): the font size times the factor the drawing is scaled by.
_DRAWING_TEXT = r"""
(() => {
  const drawings = [];
  document.querySelectorAll("div.mermaid").forEach(h => {
    const svg = h.shadowRoot && h.shadowRoot.querySelector("svg");
    if (svg) drawings.push(["diagram", svg]);
  });
  document.querySelectorAll(".md-typeset figure svg[viewBox]").forEach(s => drawings.push(["chart", s]));
  const out = [];
  drawings.forEach(([kind, svg], n) => {
    const box = svg.viewBox && svg.viewBox.baseVal;
    const width = svg.getBoundingClientRect().width;
    if (!box || !box.width || !width) return;
    const scale = width / box.width;
    let smallest = Infinity;
    svg.querySelectorAll("text, tspan, foreignObject span, foreignObject div, foreignObject p").forEach(t => {
      if (!(t.textContent || "").trim()) return;
      const size = parseFloat(getComputedStyle(t).fontSize);
      if (size) smallest = Math.min(smallest, size * scale);
    });
    if (smallest < Infinity) out.push({kind, n, px: Math.round(smallest * 10) / 10});
  });
  return out;
})()
"""
MIN_TEXT_PX = 10

# The reader's tools on a page (hooks/reader_tools.py, overrides/main.html): the footer's
# previous/next links, the edit link, the Markdown copy (fetched, as a reader's assistant
# would), and on API pages each entry's source link, as laid out (0 px wide is hidden).
_READER_TOOLS = r"""
(async () => {
  const href = (sel) => { const a = document.querySelector(sel); return a ? a.href : null; };
  const out = {
    prev: href("a.md-footer__link--prev"),
    next: href("a.md-footer__link--next"),
    edit: href("a[rel=edit]"),
    markdown: href("a.steadyloop-markdown-copy"),
    h1: ((document.querySelector("article h1") || {}).textContent || "").replace("\u00b6", "").trim(),
  };
  const entries = [...document.querySelectorAll(".doc-heading[id^='steadyloop']")];
  out.entries = entries.length;
  out.without_source = entries.filter(h => {
    const a = h.querySelector("a.steadyloop-source-link");
    return !a || a.getBoundingClientRect().width === 0 || !a.href.includes("/blob/");
  }).map(h => h.id).slice(0, 5);
  out.copy = null;
  if (out.markdown) {
    const r = await fetch(out.markdown);
    out.copy_status = r.status;
    out.copy = r.ok ? await r.text() : null;
  }
  return out;
})()
"""

# Sphinx roles (:class:`X`) print literally under mkdocstrings' Google style (trap 14).
# Rendered, the role's backticks become code: ":class:Journal" in the text.
_LITERAL_ROLE = re.compile(
    r"(?<![\w:]):(?:py:)?(?:class|func|meth|attr|mod|exc|obj|data|const|ref|term):(?=[`\w~.])"
)
# A Markdown cross-reference that did not resolve stays as its source text.
_UNRESOLVED_XREF = re.compile(r"\[[^\]\n]{1,80}\]\[[A-Za-z_][\w.]*\]")


@dataclass
class Report:
    """Problems found on the pages, by kind: kind -> page -> descriptions."""

    pages: list[str] = field(default_factory=list)
    problems: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What [_READER_TOOLS][] found on each page."""

    def add(self, kind: str, page: str, what: str) -> None:
        self.problems.setdefault(kind, {}).setdefault(page or "(home)", []).append(what)

    def of(self, kind: str) -> str:
        found = self.problems.get(kind, {})
        return "\n".join(f"  /{page}: {'; '.join(items)}" for page, items in sorted(found.items()))


_EVENTS = ("Network.requestWillBeSent", "Network.responseReceived", "Runtime.exceptionThrown")


def look_at_page(browser: DevTools, base: str, page: str, report: Report) -> None:
    """Load one page and record every problem a reader would meet on it."""
    url = base + page
    origin = re.match(r"https?://[^/]+", base)
    assert origin is not None
    browser.take_events(*_EVENTS)
    browser.viewport(WIDTHS[0], HEIGHT)
    browser.goto(url)
    # Diagrams render asynchronously after the page has loaded. How many there should be
    # comes from the page as served (Material takes the class off a block while it
    # loads Mermaid, and a block stays bare if Mermaid never comes).
    expected = browser.evaluate(
        "fetch(location.href).then(r => r.text())"
        '.then(t => (t.match(/<pre class="mermaid">/g) || []).length)'
    )
    if expected:
        with contextlib.suppress(AssertionError):  # what is still unrendered is reported below
            browser.wait_for(
                f"document.querySelectorAll('div.mermaid').length >= {expected}",
                timeout=DIAGRAM_SECONDS,
                what="diagrams",
            )
    look: dict[str, Any] = browser.evaluate(_LOOK)

    if look["rendered_diagrams"] < expected:
        shown = "; ".join(repr(t) for t in look["pre_diagrams"][:3])
        report.add(
            "diagram",
            page,
            f"{expected - look['rendered_diagrams']} of {expected} diagrams not rendered"
            + (f" (shown as code: {shown})" if shown else ""),
        )
    if look["diagram_errors"]:
        report.add("diagram", page, "Mermaid drew a 'Syntax error in text' graphic")
    if look["unrendered_notebook_diagrams"]:
        report.add("diagram", page, "a notebook Mermaid cell is not rendered")

    if look["notebook"]:
        if not look["outputs"]:
            report.add(
                "notebook", page, f"notebook page without outputs ({look['code_cells']} code cells)"
            )
        for out in look["outputs"]:
            if is_error_output(out["mime"], out["text"]):
                kind = "stderr output" if out["mime"] == STDERR_MIME else "traceback"
                report.add("notebook", page, f"{kind}: {out['text'][:120]!r}")

    text = look["text"]
    if "reference/api/" in page:
        for role in sorted(set(m.group(0) for m in _LITERAL_ROLE.finditer(text))):
            count = len(re.findall(re.escape(role), text))
            report.add("docstring", page, f"literal Sphinx role {role}… ({count}×)")
        for quote in look["blockquotes_in_docstrings"]:
            report.add("docstring", page, f"docstring section rendered as a quote: {quote!r}")
    for ref in sorted(set(m.group(0) for m in _UNRESOLVED_XREF.finditer(look["prose"]))):
        report.add("xref", page, f"unresolved cross-reference {ref}")
    for ref in look["autoref_tags"]:
        report.add("xref", page, f"unresolved cross-reference {ref!r}")

    tools: dict[str, Any] = browser.evaluate(_READER_TOOLS)
    report.tools[page] = tools
    for what in ("edit", "markdown"):
        if not tools[what]:
            report.add("reader-tools", page, f"no {what} link")
    if tools["markdown"] and (
        tools["copy"] is None or tools["h1"].split(" ")[0].strip("`") not in tools["copy"]
    ):
        report.add(
            "reader-tools",
            page,
            f"Markdown copy {tools['markdown']} ({tools.get('copy_status')}) lacks the title",
        )
    if tools["without_source"]:
        report.add(
            "reader-tools", page, f"entries without a source link: {tools['without_source']}"
        )

    for width in WIDTHS:
        if width != WIDTHS[0]:
            browser.viewport(width, HEIGHT)
            browser.evaluate(
                "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
            )
        if width < 600:
            for drawing in browser.evaluate(_DRAWING_TEXT):
                if drawing["px"] < MIN_TEXT_PX:
                    report.add(
                        f"small-text-{width}",
                        page,
                        f"{drawing['kind']} {drawing['n'] + 1}: text at {drawing['px']} px",
                    )
        sideways = browser.evaluate(_SIDEWAYS)
        if sideways:
            report.add(
                f"sideways-{width}",
                page,
                f"page is {sideways['scroll_width']} px wide in a {sideways['width']} px window;"
                f" sticking out: {', '.join(sideways['culprits']) or 'unknown'}",
            )

    browser.pump(0.2)  # the last responses
    for event in browser.take_events(*_EVENTS):
        params = event["params"]
        if event["method"] == "Network.responseReceived":
            status = params["response"]["status"]
            if status >= 400:
                report.add("failed-request", page, f"{status} {params['response']['url'][:160]}")
            continue
        if event["method"] == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            message = details.get("exception", {}).get("description") or details.get("text")
            report.add("script-error", page, str(message).splitlines()[0][:200])
            continue
        target = params["request"]["url"]
        if target.startswith(("data:", "blob:", "about:")):
            continue
        if not target.startswith(origin.group(0) + "/"):
            report.add("outside-request", page, target[:160])


@pytest.fixture(scope="module")
def report(built_site: BuiltSite, browser: DevTools, base_url: str) -> Report:
    """Visit every page of both languages once and record what is wrong with each."""
    found = Report(pages=site_pages(built_site.root))
    for page in found.pages:
        look_at_page(browser, base_url, page, found)
    browser.viewport(WIDTHS[0], HEIGHT)
    return found


def test_every_page_of_both_languages_is_visited(report: Report) -> None:
    """The walk covers the whole site: both languages, notebooks and API pages included."""
    assert len(report.pages) >= 40
    assert any(p.startswith("zh/") for p in report.pages)
    assert any(p.startswith("reference/api/") for p in report.pages)
    assert any("notebooks/" in p for p in report.pages)


def test_every_diagram_renders(report: Report) -> None:
    """Every Mermaid block becomes a drawing; none stays code, none draws a syntax error."""
    assert "diagram" not in report.problems, "diagrams:\n" + report.of("diagram")


def test_nothing_is_loaded_from_elsewhere(report: Report) -> None:
    """While loading, a page requests nothing outside the site's own origin."""
    assert "outside-request" not in report.problems, "requests outside the site:\n" + report.of(
        "outside-request"
    )


def test_no_request_fails(report: Report) -> None:
    """While loading, no page asks for anything the site lacks (no 404: sitemap.xml was)."""
    assert "failed-request" not in report.problems, "failed requests:\n" + report.of(
        "failed-request"
    )


def test_every_page_has_its_reader_tools(report: Report) -> None:
    """Each page has an edit link and a Markdown copy holding it; API entries link source."""
    assert "reader-tools" not in report.problems, "reader tools:\n" + report.of("reader-tools")
    api = [t for p, t in report.tools.items() if re.search(r"reference/api/.+", p)]
    assert api and all(t["entries"] for t in api), "an API page without entries"
    assert sum(t["entries"] for t in api) >= 500


def test_footers_lead_to_the_previous_and_next_page_of_the_same_language(
    report: Report, base_url: str
) -> None:
    """Every page links the page before and after it, in its own language; only ends lack one."""
    wrong, ends = [], {"prev": 0, "next": 0}
    for page, tools in report.tools.items():
        zh = page.startswith("zh/")
        for side in ("prev", "next"):
            target = tools[side]
            if target is None:
                ends[side] += 1
                continue
            if not target.startswith(base_url) or target.startswith(base_url + "zh/") != zh:
                wrong.append(f"/{page}: {side} -> {target}")
    assert wrong == [], "\n".join(wrong)
    # The first page of each language has no previous one, its last no next one.
    assert ends == {"prev": 2, "next": 2}, ends


_TAB_BLOCKS_SHOWN = (
    "JSON.stringify([...document.querySelector('.tabbed-set').querySelectorAll('.tabbed-block')]"
    ".map(b => b.getBoundingClientRect().height > 0))"
)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tabs_switch_what_they_show_and_keep_the_choice(
    browser: DevTools, base_url: str, lang: str
) -> None:
    """Choosing pip over uv shows its block, hides uv's, and holds on the next page too."""
    home = base_url + ("" if lang == "en" else "zh/")
    browser.viewport(WIDTHS[0], HEIGHT)
    browser.goto(home + "how-to/server-backends/")
    browser.evaluate("localStorage.clear(); sessionStorage.clear(); true")
    browser.goto(home + "tutorials/getting-started/")
    assert browser.evaluate(_TAB_BLOCKS_SHOWN) == "[true,false]"
    browser.evaluate("document.querySelector('.tabbed-set label:nth-of-type(2)').click()")
    browser.wait_for(f"{_TAB_BLOCKS_SHOWN} === '[false,true]'", timeout=10, what="the pip tab")
    assert "pip install" in browser.evaluate("document.querySelector('.tabbed-set').innerText")
    # Linked tabs (content.tabs.link): the next page opens on the reader's choice.
    browser.goto(home + "how-to/server-backends/")
    browser.wait_for(f"{_TAB_BLOCKS_SHOWN} === '[false,true]'", timeout=10, what="pip kept")
    browser.evaluate("localStorage.clear(); sessionStorage.clear(); true")


def test_no_script_error(report: Report) -> None:
    """No page raises an uncaught JavaScript error while it loads."""
    assert "script-error" not in report.problems, "script errors:\n" + report.of("script-error")


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways(report: Report, width: int) -> None:
    """At a laptop's and a phone's width, no page is wider than the window."""
    kind = f"sideways-{width}"
    assert kind not in report.problems, f"pages that scroll sideways at {width} px:\n" + report.of(
        kind
    )


def test_drawings_keep_readable_text_on_a_phone(report: Report) -> None:
    """At 390 px, diagram and chart text stays at 10 px or more (the drawing scrolls instead)."""
    kind = f"small-text-{WIDTHS[1]}"
    assert kind not in report.problems, f"text below {MIN_TEXT_PX} px:\n" + report.of(kind)


def test_notebook_pages_show_clean_outputs(report: Report) -> None:
    """A notebook page shows the outputs of its run, with no traceback and nothing on stderr."""
    assert "notebook" not in report.problems, "notebook pages:\n" + report.of("notebook")


def test_api_pages_render_docstrings(report: Report) -> None:
    """API pages show no literal Sphinx role and no docstring section as a quote."""
    assert "docstring" not in report.problems, "API pages:\n" + report.of("docstring")


def test_cross_references_resolve(report: Report) -> None:
    """No page shows a cross-reference as its unresolved source text."""
    assert "xref" not in report.problems, "unresolved cross-references:\n" + report.of("xref")


# -- the reader's paths: language switch, search ------------------------------------------


def test_language_switch_keeps_the_anchor(browser: DevTools, base_url: str) -> None:
    """Switching language on a section lands on the same section of the other language."""
    for start, other, lang in (
        ("explanation/journal/#idempotency-keys", "zh/explanation/journal/", "zh"),
        ("zh/explanation/journal/#idempotency-keys", "explanation/journal/", "en"),
    ):
        browser.goto(base_url + start.split("#")[0])
        browser.evaluate(f"location.hash = {json.dumps('#' + start.split('#')[1])}")
        browser.evaluate(f"document.querySelector('a.md-select__link[hreflang={lang}]').click()")
        browser.loaded(SITE_PREFIX + other)
        assert browser.evaluate("location.hash") == "#idempotency-keys"
        assert browser.evaluate("document.documentElement.lang") == lang
        assert browser.evaluate("!!document.getElementById('idempotency-keys')")


_LAST_SECTION_ID = (
    "(() => { const h = [...document.querySelectorAll("
    "'article h2[id], article h3[id], article h4[id]')]; return h.length ? h[h.length - 1].id : null })()"
)


# Every notebook pair, and a generated page of each kind. That every page pair carries the
# same section ids is checked in the built HTML (test_docs_site.py); here, that the switch
# really keeps the anchor, both ways (each page load costs seconds on a busy machine).
SWITCH_PAGES = ("tutorials/notebooks/", "reference/cli/", "reference/api/journal/")


def test_language_switch_keeps_the_anchor_on_notebook_pairs(
    built_site: BuiltSite, browser: DevTools, base_url: str
) -> None:
    """On every notebook page and generated pages, both ways: the switch keeps the section."""
    lost = []
    pages = [
        p
        for p in site_pages(built_site.root)
        if p.startswith(SWITCH_PAGES) and p != "tutorials/notebooks/"
    ]
    assert len(pages) >= 9, pages
    for page in pages:
        for start, other, lang in ((page, "zh/" + page, "zh"), ("zh/" + page, page, "en")):
            if not (built_site.root / other / "index.html").is_file():
                continue
            browser.goto(base_url + start)
            anchor = browser.evaluate(_LAST_SECTION_ID)
            if not anchor:
                continue
            browser.evaluate(f"location.hash = {json.dumps('#' + anchor)}")
            browser.evaluate(
                f"document.querySelector('a.md-select__link[hreflang={lang}]').click()"
            )
            browser.loaded(SITE_PREFIX + other)
            landed = browser.evaluate(
                "decodeURIComponent(location.hash.slice(1))"
                " + '|' + !!document.getElementById(decodeURIComponent(location.hash.slice(1)))"
            )
            if landed != f"{anchor}|true":
                lost.append(f"/{start}#{anchor} -> /{other}: {landed}")
    assert lost == [], "the switch lost the section:\n" + "\n".join(lost)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_divergence_table_fits_a_laptop(browser: DevTools, base_url: str, lang: str) -> None:
    """At 1366 px the framework_stores divergence table shows every column without scrolling."""
    page = ("" if lang == "en" else "zh/") + "tutorials/notebooks/framework_stores/"
    browser.viewport(WIDTHS[0], HEIGHT)
    browser.goto(base_url + page)
    # Where the last column (the store's value) ends, against the table's visible box.
    edges = browser.evaluate(
        "(() => { const t = document.querySelector('table.steadyloop-divergences');"
        " if (!t) return null; const th = [...t.querySelectorAll('th')].pop();"
        " return [th.getBoundingClientRect().right, t.getBoundingClientRect().right] })()"
    )
    assert edges, "no divergence table"
    # A few pixels of slack: the cells' borders.
    assert edges[0] <= edges[1] + 4, f"the last column ends at {edges[0]} px, the box at {edges[1]}"


# (language, query, the page that must come first)
SEARCHES = [
    ("en", "idempotency key", "explanation/journal/"),
    ("en", "torn tail", "explanation/journal/"),
    ("en", "lease heartbeat", "how-to/workers-on-several-machines/"),
    ("en", "choose replay policies", "how-to/replay-policies/"),
    ("en", "conformance suite", "how-to/write-a-backend/"),
    ("en", "GitHub Pages", "how-to/publish-docs/"),
    ("zh", "幂等键", "explanation/journal/"),
    ("zh", "乐观并发", "explanation/journal/"),
    ("zh", "租约 心跳", "how-to/workers-on-several-machines/"),
    ("zh", "一致性套件", "how-to/write-a-backend/"),
    ("zh", "发布", "how-to/publish-docs/"),
    ("zh", "回放比对", "explanation/replay-diff/"),
    ("zh", "审计循环", "explanation/audit-loop/"),
    # The page that explains resume, not a notebook that resumes in every section.
    ("en", "resume", "explanation/crash-resume/"),
    ("zh", "resume", "explanation/crash-resume/"),
]


@pytest.mark.parametrize(("lang", "query", "first"), SEARCHES)
def test_search_puts_the_right_page_first(
    browser: DevTools, base_url: str, lang: str, query: str, first: str
) -> None:
    """Searching from a page finds that language's own page first, and no other language's."""
    home = base_url if lang == "en" else f"{base_url}zh/"
    browser.goto(home)
    links = browser.search(query)
    root = home
    pages = [link.split("#")[0].split("?")[0] for link in links]
    assert pages, f"{query!r} found nothing"
    assert all(p.startswith(root) for p in pages), (
        f"{query!r} lists pages of another language: {pages}"
    )
    assert pages[0] == root + first, (
        f"{query!r}: first result {pages[0]}, expected {root + first}; all: {pages}"
    )


# (query typed on a Chinese page, what every entry found must contain, the page one of the
# first results must be on). The index keeps 幂等键 and 回放 whole; the query must be cut the
# same way (hooks/search_per_language.py), and API entries, whose text is English, must be
# in the Chinese index too.
CHINESE_SEARCHES = [
    ("幂等键", "幂等键", "explanation/journal/"),
    ("回放", "回放", "explanation/replay-diff/"),
    ("TERMINAL", "terminal", "reference/api/audit/"),
]
_TAG = re.compile(r"<[^>]+>")


@pytest.mark.parametrize("search", CHINESE_SEARCHES, ids=[q for q, _, _ in CHINESE_SEARCHES])
def test_chinese_search_returns_only_matching_entries(
    built_site: BuiltSite, browser: DevTools, base_url: str, search: tuple[str, str, str]
) -> None:
    """A Chinese query lists only entries holding it, highlights only it, lacks no term."""
    query, term, page = search
    index = json.loads((built_site.root / "zh" / "search" / "search_index.json").read_text("utf-8"))
    texts = {
        d["location"]: _TAG.sub("", d["title"] + " " + d["text"]).replace("\u200b", "").lower()
        for d in index["docs"]
    }
    home = f"{base_url}zh/"
    browser.goto(home)
    links = browser.search(query)
    assert all(link.startswith(home) for link in links), f"{query!r}: another language: {links}"
    # A result links "page/?h=<highlighted terms>#section"; a page's own entry heads its
    # group even when only its sections matched, and then highlights nothing ("?h=").
    found, matched = [], []
    for link in links:
        parts = urlsplit(link.removeprefix(home))
        location = parts.path + (f"#{unquote(parts.fragment)}" if parts.fragment else "")
        found.append(location)
        if parse_qs(parts.query).get("h"):
            matched.append(location)
    without = [loc for loc in matched if term not in texts.get(loc, "")]
    assert without == [], f"{query!r} lists entries without {term!r}: {without}"
    assert any(loc.startswith(page) for loc in found[:5]), f"{query!r}: {page} not in {found[:5]}"
    shown = browser.evaluate(
        "({marks: [...document.querySelectorAll('.md-search-result mark')].map(m => m.textContent),"
        " missing: [...document.querySelectorAll('.md-search-result del')].map(m => m.textContent)})"
    )
    wrong = [m for m in shown["marks"] if not m.lower().replace("\u200b", "").startswith(term)]
    assert wrong == [], f"{query!r} highlights other words: {sorted(set(wrong))[:10]}"
    assert shown["missing"] == [], f"{query!r}: results lack terms {sorted(set(shown['missing']))}"
