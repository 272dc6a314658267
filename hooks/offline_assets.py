"""MkDocs hook: the site loads nothing from elsewhere; Mermaid is served from the site.

Why (DOCS-NOTES.md, trap 13): Material loads Mermaid from a CDN the first time a page
has a diagram, and mkdocs-jupyter's notebook template imports Mermaid from another CDN
and loads MathJax from an empty ``src``. Without those hosts every diagram is shown as
code, and for many readers they are slow or blocked.

* Mermaid comes from the ``mermaidx`` package (pinned in ``pyproject.toml``, MIT), which
  ships the unmodified ``dist/mermaid.min.js`` of Mermaid 11.16.0 (byte-identical to the
  npm release; checked here by SHA-256, so a different file fails the build instead of
  changing the site silently). The build copies it to ``assets/javascripts/`` with
  Mermaid's licence beside it; ``overrides/main.html`` loads it on pages that have a
  diagram, before Material looks for ``window.mermaid`` (and so never for its CDN).
* Notebook pages lose the CDN ``import()`` of Mermaid and the empty MathJax ``<script>``
  (no notebook uses either; a Mermaid cell would show as unrendered in the browser test).
* Fonts: ``theme.font: false`` and system font stacks in ``assets/stylesheets/site.css``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page

MERMAID_VERSION = "11.16.0"
MERMAID_SHA256 = "74d7c46dabca328c2294733910a8aa1ed0c37451776e8d5295da38a2b758fb9b"
MERMAID_PACKAGE = "mermaidx"
MERMAID_IN_PACKAGE = ("assets", "mermaid.js")
MERMAID_TARGET = "assets/javascripts/mermaid.min.js"

MERMAID_LICENSE = """\
Mermaid {version} (https://mermaid.js.org), assets/javascripts/mermaid.min.js

The MIT License (MIT)

Copyright (c) 2014 - 2022 Knut Sveidqvist

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def mermaid_source() -> Path:
    """The pinned ``mermaid.min.js`` shipped by the ``mermaidx`` package, checked.

    Raises:
        PluginError: the package is missing, or its file is not the pinned release.
    """
    spec = importlib.util.find_spec(MERMAID_PACKAGE)  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise PluginError(
            f"offline_assets: the {MERMAID_PACKAGE!r} package is not installed; it ships the"
            " site's Mermaid (it is in the docs dependency group: run `uv sync`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*MERMAID_IN_PACKAGE)
    if not path.is_file():
        raise PluginError(f"offline_assets: {path} is missing from {MERMAID_PACKAGE}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != MERMAID_SHA256:
        raise PluginError(
            f"offline_assets: {path} has SHA-256 {digest}, not that of Mermaid"
            f" {MERMAID_VERSION} ({MERMAID_SHA256}); pin {MERMAID_PACKAGE} back or update"
            " MERMAID_VERSION and MERMAID_SHA256 in hooks/offline_assets.py after checking"
            " the new file against Mermaid's own release"
        )
    return path


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Fail early, before any page is built, if the pinned Mermaid is not at hand."""
    mermaid_source()
    config.extra["mermaid_script"] = MERMAID_TARGET
    return config


# mkdocs-jupyter's template: a module script that imports Mermaid from a CDN, and the
# MathJax loader with an empty src (which fetches the page itself as a script).
_CDN_MODULE = re.compile(
    r"<script type=\"module\">(?:(?!</script>).)*?https?://(?:(?!</script>).)*?</script>", re.S
)
_EMPTY_SCRIPT = re.compile(r"<script src=\"\">\s*</script>")


def strip_remote_scripts(html: str) -> str:
    """Remove the notebook template's CDN import and its empty-src MathJax loader."""
    return _EMPTY_SCRIPT.sub("", _CDN_MODULE.sub("", html))


def on_page_content(html: str, page: Page, **kwargs: Any) -> str:
    """Notebook pages: drop the scripts that would load from elsewhere."""
    if page.file.src_uri.endswith(".ipynb"):
        return strip_remote_scripts(html)
    return html


def on_post_build(config: MkDocsConfig) -> None:
    """Copy the pinned Mermaid and its licence into the built site."""
    target = Path(config.site_dir) / MERMAID_TARGET
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mermaid_source(), target)
    target.with_name("mermaid.LICENSE.txt").write_text(
        MERMAID_LICENSE.format(version=MERMAID_VERSION), encoding="utf-8"
    )
