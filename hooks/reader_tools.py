"""MkDocs hook: the reader's tools. Source links, edit links, a Markdown copy of every page.

* **Source links.** Every API entry (a mkdocstrings heading whose id is a dotted
  ``steadyloop.…`` path) gets a link to its definition in the repository, at the commit
  the site was built from: ``{repo_url}/blob/{commit}/src/steadyloop/x.py#L10-L42``. The
  object is found with griffe (the loader mkdocstrings uses) through re-exports to the
  module that defines it. The commit is ``git rev-parse HEAD`` at build time, or
  ``STEADYLOOP_DOCS_COMMIT``; without either the build warns (and ``--strict`` fails),
  as it does for an entry whose definition cannot be found.
* **Edit links.** ``edit_uri`` (``mkdocs.yml``) gives the branch; every page's link is
  rebuilt from the real path of its source, so a notebook (``docs/en/tutorials/notebooks``
  is a symlink to ``notebooks/en``) links to ``notebooks/en/x.ipynb``, a file the
  repository has.
* **One summary on an API page.** A page opens with its own summary in its language;
  the module docstring's first paragraph, the same summary in English, is left out.
* **A Markdown copy of every page** next to its HTML (``explanation/journal/index.md``),
  and ``llms.txt`` per language (``/llms.txt``, ``/zh/llms.txt``), listing every page of
  the navigation with its copy's address. The copy is the page's Markdown after the
  build-time generators ran (CLI reference, figures), with each ``::: steadyloop.x``
  directive replaced by the entry's signature and docstring, and inline SVG left out; a
  notebook's copy is its Markdown cells and its code cells as fenced Python.
* **No sitemap fetch per page.** Material fetches ``sitemap.xml`` next to every
  ``<link rel="alternate">`` of a page; those are per-page links here, so each page load
  made two requests that 404. The hreflang alternates are in ``/sitemap.xml`` (the i18n
  plugin writes them there, where search engines read them too), and the language
  switcher is ``site.js``'s, so the head links are dropped.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import subprocess
from functools import cache
from html import escape
from pathlib import Path
from typing import Any

from mkdocs import plugins
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = "steadyloop"
API_PAGES = "/reference/api/"
MARKDOWN_COPY = "index.md"
LLMS = "llms.txt"

log = logging.getLogger("mkdocs.hooks.reader_tools")

LABELS = {
    "en": {"source": "source", "source_title": "Source: {path}, line {start}"},
    "zh": {"source": "源码", "source_title": "源码：{path} 第 {start} 行"},
}

_state: dict[str, Any] = {"commit": None}
_markdown: dict[str, str] = {}  # src_uri -> the page's Markdown for its copy
_navs: dict[str, Navigation] = {}  # language -> its navigation


def language(page: Page) -> str:
    """The page's language, from its source path."""
    return "zh" if page.file.src_uri.startswith("zh/") else "en"


def build_commit() -> str | None:
    """The commit the site is built from: ``STEADYLOOP_DOCS_COMMIT`` or git's HEAD."""
    explicit = os.environ.get("STEADYLOOP_DOCS_COMMIT", "").strip()
    if explicit:
        return explicit
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


@cache
def _package() -> Any:
    import griffe

    return griffe.load(PACKAGE, search_paths=[str(SRC)], resolve_aliases=True)


def definition(path: str) -> tuple[str, int | None, int | None] | None:
    """Where ``steadyloop.a.B`` is defined: (file below ``src/``, first line, last line)."""
    package = _package()
    try:
        found = package if path == PACKAGE else package[path.removeprefix(PACKAGE + ".")]
        target = found.final_target if found.is_alias else found
        filepath = target.relative_package_filepath
    except Exception:  # griffe raises several kinds for a name it lacks
        return None
    return Path(filepath).as_posix(), target.lineno, target.endlineno


def source_url(repo_url: str, commit: str, file: str, start: int | None, end: int | None) -> str:
    """The repository's view of ``src/<file>`` at ``commit``, at the given lines."""
    url = f"{repo_url.rstrip('/')}/blob/{commit}/src/{file}"
    if start is not None:
        url += f"#L{start}" + (f"-L{end}" if end is not None and end != start else "")
    return url


# -- events -------------------------------------------------------------------------------


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Find the commit the site is built from; the source links point at it."""
    _state["commit"] = build_commit()
    if _state["commit"] is None:
        log.warning(
            "no commit for the API source links: not a git checkout and "
            "STEADYLOOP_DOCS_COMMIT is not set"
        )
    return config


@plugins.event_priority(-200)  # after mkdocs-static-i18n translated it (-100)
def on_nav(nav: Navigation, config: MkDocsConfig, files: Any) -> Navigation:
    """Keep the language's navigation, for its ``llms.txt``."""
    pages = nav.pages
    if pages:
        _state["lang"] = language(pages[0])
        _navs[_state["lang"]] = nav
    return nav


@plugins.event_priority(-100)  # after the hooks that generate Markdown (CLI, figures…)
def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Keep the page's Markdown for its copy (a notebook's is made from the notebook)."""
    src = page.file.src_uri
    if src.endswith(".ipynb"):
        text = notebook_markdown(Path(page.file.abs_src_path or ""))
    else:
        text = copy_of(markdown)
    _markdown[src] = absolute_links(text, src, kwargs["files"], kwargs["config"].site_url or "")
    return markdown


def on_page_context(context: Any, page: Page, config: MkDocsConfig, **kwargs: Any) -> Any:
    """Point the edit link at the file the repository holds (through the notebook links)."""
    edit_uri = config.edit_uri or ""
    docs = Path(config.docs_dir).resolve().relative_to(ROOT).as_posix() + "/"
    if page.file.abs_src_path and edit_uri.endswith(docs) and config.repo_url:
        real = Path(page.file.abs_src_path).resolve().relative_to(ROOT).as_posix()
        branch = edit_uri.removesuffix(docs).strip("/")
        page.edit_url = f"{config.repo_url.rstrip('/')}/{branch}/{real}"
    return context


_MODULE_SUMMARY = re.compile(
    r'(<div class="doc doc-object doc-module">\s*<div class="doc doc-contents first">\s*)'
    r"<p>.*?</p>\s*",
    re.S,
)
_ENTRY = re.compile(
    r'(<h[2-6] id="(?P<id>steadyloop(?:\.[\w]+)*)" class="doc doc-heading">.*?)'
    r'(?=<a href="#(?P=id)" class="headerlink")',
    re.S,
)


@plugins.event_priority(-60)
def on_page_content(html: str, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    """On API pages: one summary, and a source link on every entry."""
    if API_PAGES not in "/" + page.file.src_uri:
        return html
    html = _MODULE_SUMMARY.sub(r"\1", html, count=1)
    commit = _state["commit"]
    if commit is None or not config.repo_url:
        return html
    t = LABELS[language(page)]
    missing: list[str] = []

    def link(match: re.Match[str]) -> str:
        where = definition(match.group("id"))
        if where is None:
            missing.append(match.group("id"))
            return match.group(1)
        file, start, end = where
        url = source_url(config.repo_url, commit, file, start, end)
        title = t["source_title"].format(path=f"src/{file}", start=start or 1)
        return (
            f'{match.group(1)}<a class="steadyloop-source-link" href="{escape(url)}"'
            f' title="{escape(title)}">{t["source"]}</a>'
        )

    html = _ENTRY.sub(link, html)
    for name in missing:
        log.warning("%s: no source found for the API entry %s", page.file.src_uri, name)
    return html


_HEAD_ALTERNATE = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="[^"]*">\s*')


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Drop the per-page alternates from the head; write the page's Markdown copy."""
    output = _HEAD_ALTERNATE.sub("", output)
    text = _markdown.get(page.file.src_uri)
    if text is not None and page.file.dest_uri.endswith("index.html"):
        target = Path(config.site_dir) / page.file.dest_uri.removesuffix("index.html")
        target.mkdir(parents=True, exist_ok=True)
        (target / MARKDOWN_COPY).write_text(text, encoding="utf-8")
    return output


def on_post_build(config: MkDocsConfig) -> None:
    """Write this language's ``llms.txt`` (each language's build runs this once).

    Runs before mkdocs-static-i18n's own ``on_post_build`` (-100), which builds the other
    languages: the navigation kept last is this build's.
    """
    lang = _state.get("lang")
    if lang is None:
        return
    folder = Path(config.site_dir) / ("" if lang == "en" else lang)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LLMS).write_text(llms_txt(_navs[lang], config, lang), encoding="utf-8")


# -- the Markdown copies ------------------------------------------------------------------


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_DIRECTIVE = re.compile(r"^::: (?P<path>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+.*\n|[ \t]*\n)*)", re.M)
_OPTION = re.compile(r"^\s+(\w+):\s*(.*?)\s*$", re.M)


_RELATIVE_LINK = re.compile(
    r"\]\((?P<target>(?![a-z]+:|#|/)[^)\s#]+\.(?:md|ipynb))(?P<anchor>#[^)\s]*)?\)"
)


def absolute_links(text: str, src_uri: str, files: Any, site_url: str) -> str:
    """Links to other pages, which are relative to the source, lead to their copies."""
    base = site_url.rstrip("/") + "/"

    def resolve(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), match["target"]))
        found = files.get_file_from_path(target)
        if found is None or found.url is None:
            return match.group(0)
        return f"]({base}{found.url}{MARKDOWN_COPY}{match['anchor'] or ''})"

    return _RELATIVE_LINK.sub(resolve, text)


def copy_of(markdown: str) -> str:
    """The Markdown a page's copy holds: API directives expanded, inline SVG left out."""
    return _DIRECTIVE.sub(_expand, _SVG.sub("", markdown))


def _expand(match: re.Match[str]) -> str:
    options = dict(_OPTION.findall(match.group("options")))
    level = int(options.get("heading_level", "2"))
    with_members = options.get("members", "").strip().lower() != "false"
    return api_markdown(match.group("path"), level, members=with_members) + "\n"


def api_markdown(path: str, level: int = 2, *, members: bool = True) -> str:
    """An API entry as Markdown: a heading, its signature, its docstring, its members."""
    package = _package()
    try:
        found = package if path == PACKAGE else package[path.removeprefix(PACKAGE + ".")]
    except Exception:  # griffe raises several kinds for a name it lacks
        return f"`{path}`\n"
    obj = found.final_target if found.is_alias else found
    out = [f"{'#' * min(level, 6)} `{path}`", ""]
    if obj.kind.value in {"function", "class"}:
        out += ["```python", f"{obj.name}{_signature(obj)}", "```", ""]
    if obj.kind.value == "class" and obj.bases:
        out += ["Bases: " + ", ".join(f"`{base}`" for base in obj.bases), ""]
    elif obj.kind.value == "attribute" and obj.value is not None:
        out += ["```python", f"{obj.name} = {obj.value}", "```", ""]
    if obj.docstring is not None:
        out += [obj.docstring.value.strip(), ""]
    if members and obj.kind.value == "class":
        for name, member in obj.members.items():
            if name.startswith("_") or member.is_alias or member.inherited:
                continue
            out.append(api_markdown(f"{path}.{name}", level + 1, members=False))
    return "\n".join(out)


def _signature(obj: Any) -> str:
    try:
        text: str = obj.signature()
    except Exception:  # griffe raises several kinds for a name it lacks
        return "(…)"
    return text[len(obj.name) :] if text.startswith(obj.name) else text


def notebook_markdown(path: Path) -> str:
    """A notebook as Markdown: its Markdown cells as they are, its code cells fenced."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    parts = []
    for cell in notebook.get("cells", []):
        source = "".join(cell.get("source", [])).strip()
        if not source:
            continue
        if cell.get("cell_type") == "code":
            parts.append(f"```python\n{source}\n```")
        elif cell.get("cell_type") == "markdown":
            parts.append(source)
    return "\n\n".join(parts) + "\n"


def _summary(page: Page) -> str:
    """The first sentence of a page's first paragraph, for its line in ``llms.txt``."""
    text = _markdown.get(page.file.src_uri, "")
    for raw in re.split(r"\n\s*\n", text):
        block = raw.strip()
        if not block or block.startswith(("#", "<", "[]", ":::", "```", "|", "!!!", "-", "*")):
            continue
        plain = re.sub(r"\[([^\]]*)\]\[[^\]]*\]|\[([^\]]*)\]\([^)]*\)", r"\1\2", block)
        plain = " ".join(plain.split())
        sentence = re.split(r"(?<=[.])\s|(?<=。)", plain, maxsplit=1)[0]
        return sentence if len(sentence) <= 200 else sentence[:199] + "…"
    return ""


def llms_txt(nav: Navigation, config: MkDocsConfig, lang: str) -> str:
    """``llms.txt``: the site's name and summary, then every page by section, with its copy."""
    site_url = (config.site_url or "").rstrip("/") + "/"
    description = " ".join((config.site_description or "").split())
    out = [f"# {config.site_name}", "", f"> {description}", ""]

    def walk(items: list[Any], heading: str | None) -> None:
        lines = []
        for item in items:
            if isinstance(item, Page):
                summary = _summary(item)
                line = f"- [{item.title}]({site_url}{item.url}{MARKDOWN_COPY})"
                lines.append(line + (f": {summary}" if summary else ""))
        if lines:
            out.extend([f"## {heading}" if heading else "## Steadyloop", "", *lines, ""])
        for item in items:
            if isinstance(item, Section):
                walk(item.children, item.title if heading is None else f"{heading} / {item.title}")

    walk(nav.items, None)
    return "\n".join(out)
