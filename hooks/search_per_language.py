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

Chinese words: jieba (trap 3) cuts the page text at build time; the glossary's terms
are in ``hooks/search_words.txt`` (a jieba user dictionary, ``search.jieba_dict_user``)
so that a term like 幂等键 is one word, as a reader types it, not 幂等 + 键.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs import plugins
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.pages import Page

INDEX = Path("search") / "search_index.json"
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
