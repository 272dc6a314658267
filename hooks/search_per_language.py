"""MkDocs hook: each language searches its own pages.

mkdocs-static-i18n 1.3.1 has no per-language search: its ``reconfigure_search`` only adds
the languages to lunr and removes duplicate entries, and it writes one index with the
pages of every language (DOCS-NOTES.md, trap 15), so an English query lists Chinese
pages and the other way round. This hook, after the last language is built:

* splits ``search/search_index.json`` by language: the default language's pages stay
  there (lunr configured for that language only); every other language gets
  ``<lang>/search/search_index.json`` with its own pages, their locations relative to
  the language's root, and the configured languages and separator (Chinese pages quote
  English identifiers, so ``zh`` keeps ``en`` too);
* points each page's theme configuration (``__config`` ``base``) at its language's
  root, where Material's search looks for ``search/search_index.json`` and against
  which it resolves result links.

Entries whose text is the same in both languages (API docstrings, CLI help, both in
English) stay in each language's index: mkdocs-static-i18n's ``reconfigure_search``
would drop them from the second language before the split (``mkdocs.yml`` turns it
off; the search languages are listed there).

Chinese words: jieba (trap 3) cuts the page text at build time; the glossary's terms
are in ``hooks/search_words.txt`` (a jieba user dictionary, ``search.jieba_dict_user``)
so that a term like 幂等键 is one word, as a reader types it, not 幂等 + 键.

Chinese queries are cut the same way. Material's search worker segments a run of Han
characters in the query over its inverted index, and never tries the whole run (its
loop stops one character short): 幂等键 becomes 幂等 + 等 + 键, an OR query, so most
results hold only 等 or 键, and 回放 becomes 回, which highlights 回来. Here each index
ships its own term list (``config.terms``: every Han word the index was cut into), and
the worker copy in the site is patched to cut each Han run of a query by longest match
over that list (``_SEGMENTER``): the longest piece from the left that some index word
starts with (each piece is searched as a prefix), so 幂等键 stays one term and 一致性
finds 一致性套件; characters no word starts with stay together as one term. A Material
release whose worker no longer has the replaced line fails the build, naming this hook.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs import plugins
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page

INDEX = Path("search") / "search_index.json"
WORKERS = Path("assets") / "javascripts" / "workers"
_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_TAGS = re.compile(r"<[^>]+>")
# The line of Material's search worker (9.x) that segments the query's Han runs.
_WORKER_SEGMENT = re.compile(
    r'(?P<q>[A-Za-z_$][\w$]*)=(?P=q)\.replace\(new RegExp\("\\\\p\{sc=Han\}\+","gu"\),'
    r"(?P<v>[A-Za-z_$][\w$]*)=>\[\.\.\.[A-Za-z_$][\w$]*\((?P=v),this\.index\.invertedIndex\)\]"
    r'\.join\("\* "\)\)'
)
_PATCHED = "/* steadyloop: query segmentation */"
_SEGMENTER = (
    _PATCHED
    + r"""
(function () {
  "use strict";
  // The index's own Han words, sorted, from the setup message (config.terms,
  // search_per_language.py).
  var terms = null;
  addEventListener("message", function (ev) {
    var d = ev.data;
    if (d && d.type === 0 && d.data && d.data.config && Array.isArray(d.data.config.terms)) {
      terms = d.data.config.terms;
    }
  });
  // Whether some term starts with text (binary search over the sorted terms).
  function begins(text) {
    var lo = 0, hi = terms.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (terms[mid] < text) lo = mid + 1; else hi = mid;
    }
    return lo < terms.length && terms[lo].lastIndexOf(text, 0) === 0;
  }
  // Longest match from the left: the longest piece some term starts with (it is searched
  // as a prefix); characters no term starts with stay together as one piece.
  function cut(run) {
    var parts = [], rest = "", i = 0;
    while (i < run.length) {
      var n = run.length - i;
      while (n > 0 && !begins(run.slice(i, i + n))) n--;
      if (n === 0) { rest += run[i]; i += 1; continue; }
      if (rest) { parts.push(rest); rest = ""; }
      parts.push(run.slice(i, i + n));
      i += n;
    }
    if (rest) parts.push(rest);
    return parts;
  }
  self.steadyloopSegment = function (query) {
    if (!terms) return query;
    return query.replace(/\p{sc=Han}+/gu, function (run) { return cut(run).join(" "); });
  };
})();
"""
)
_CONFIG_SCRIPT = re.compile(
    r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S
)


def _languages(config: MkDocsConfig) -> tuple[str, list[str]]:
    """The default language and the other built languages, from the i18n plugin."""
    i18n = config.plugins.get("i18n")
    if i18n is None:
        return "en", []
    default = i18n.default_language
    others = [
        lang.locale for lang in i18n.config.languages if lang.build and lang.locale != default
    ]
    return default, others


def _page_language(page: Page, others: list[str]) -> str | None:
    for lang in others:
        if page.url == f"{lang}/" or page.url.startswith(f"{lang}/"):
            return lang
    return None


def on_post_page(output: str, page: Page, config: MkDocsConfig) -> str:
    """Set ``base`` in a non-default language page's theme configuration to its root."""
    _default, others = _languages(config)
    lang = _page_language(page, others)
    if lang is None:
        return output

    def rebase(match: re.Match[str]) -> str:
        data = json.loads(match.group(2))
        data["base"] = f"{data['base'].rstrip('/')}/{lang}/"
        return match.group(1) + json.dumps(data) + match.group(3)

    return _CONFIG_SCRIPT.sub(rebase, output, count=1)


def index_terms(entries: list[dict[str, Any]], separator: str) -> list[str]:
    """Every Han word of the entries as the search client cuts them (their Han runs)."""
    split = re.compile(separator)
    found: set[str] = set()
    for entry in entries:
        for field in (entry.get("title", ""), entry.get("text", "")):
            for token in split.split(_TAGS.sub(" ", field)):
                found.update(_HAN_RUN.findall(token))
    return sorted(found)


def patch_worker(site_dir: Path) -> list[Path]:
    """Make the site's search worker cut Han queries over the index's terms (once)."""
    workers = sorted((site_dir / WORKERS).glob("search.*.js"))
    if not workers:
        raise PluginError(f"search_per_language: no search worker in {site_dir / WORKERS}")
    for worker in workers:
        code = worker.read_text(encoding="utf-8")
        if code.startswith(_PATCHED):
            continue
        patched, count = _WORKER_SEGMENT.subn(r"\g<q>=self.steadyloopSegment(\g<q>)", code)
        if count != 1:
            raise PluginError(
                f"search_per_language: {worker.name} has {count} query-segmenting lines, not 1;"
                " Material's search worker changed, update hooks/search_per_language.py"
            )
        worker.write_text(_SEGMENTER + patched, encoding="utf-8")
    return workers


def split_index(site_dir: Path, default: str, others: list[str]) -> dict[str, int]:
    """Split the site's one search index into one per language; return entry counts."""
    path = site_dir / INDEX
    index: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    docs: list[dict[str, Any]] = index["docs"]
    by_lang: dict[str, list[dict[str, Any]]] = {lang: [] for lang in [default, *others]}
    for doc in docs:
        for lang in others:
            if doc["location"].startswith(f"{lang}/"):
                by_lang[lang].append({**doc, "location": doc["location"][len(lang) + 1 :]})
                break
        else:
            by_lang[default].append(doc)
    counts = {}
    for lang, entries in by_lang.items():
        config = dict(index["config"])
        if lang == default:
            config["lang"] = [default]
            target = path
        else:
            config["lang"] = list(dict.fromkeys([*index["config"]["lang"]]))
            target = site_dir / lang / INDEX
        config["terms"] = index_terms(entries, config["separator"])  # for the worker's segmenter
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            json.dumps(
                {"config": config, "docs": entries}, ensure_ascii=False, separators=(",", ":")
            ),
            encoding="utf-8",
        )
        counts[lang] = len(entries)
    return counts


@plugins.event_priority(-200)  # after mkdocs-static-i18n (-100) wrote the merged index
def on_post_build(config: MkDocsConfig) -> None:
    """Once every language is built, give each its own index."""
    i18n = config.plugins.get("i18n")
    if i18n is not None and getattr(i18n, "building", False):
        return  # a language build inside i18n's loop; the merged index comes later
    default, others = _languages(config)
    if others and (Path(config.site_dir) / INDEX).is_file():
        split_index(Path(config.site_dir), default, others)
        patch_worker(Path(config.site_dir))
