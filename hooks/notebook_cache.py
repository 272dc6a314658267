"""Executed notebooks: nbmake runs each one once per source state; the docs build reads it.

The notebooks run in one place: the notebook tests of ``uv run pytest`` (nbmake, turned on
by ``--nbmake`` in the default options). The root ``conftest.py`` points each nbmake test
at a copy of its notebook staged here and turns nbmake's ``--overwrite`` on, so nbmake
writes the executed notebook into that copy, never into the committed source. A notebook
that passes keeps its copy as *the executed copy* for its key; one that fails keeps none.
A notebook whose current executed copy exists is not run again (its test is skipped,
saying so): it already passed in this state.

The key is a SHA-256 of: the notebook file, every file under ``src/`` (path and bytes),
``pyproject.toml``, the Python version and every installed distribution's name and
version. A changed notebook, a changed line of the library or an upgraded dependency
gives a new key, so an executed copy is never taken for a newer state; stale copies of
the same notebook are deleted when a new one is kept.

The docs build (this file is an MkDocs hook) executes nothing:

* ``on_files``: finds the current executed copy of every notebook of both languages, and
  fails the build naming each notebook that has none (never run, failed, or stale) and
  the command that refreshes it (``uv run pytest notebooks``). mkdocs-jupyter is set to
  ``execute: false``.
* ``on_serve``: ``mkdocs serve`` also watches the cache, so the site rebuilds when
  ``uv run pytest notebooks`` keeps a new executed copy.
* ``on_pre_page`` / ``on_page_content``: a notebook page is rendered from its executed
  copy; afterwards the page points at its source again, so the ``.ipynb`` offered for
  download is the committed notebook, without outputs.

``python hooks/notebook_cache.py [NOTEBOOK ...]`` prints what is cached, or whether each
notebook given has a current executed copy (exit status 1 when one lacks it).

``STEADYLOOP_DOCS_FAST=1`` (the fast ``mkdocs serve`` mode): a notebook whose current
executed copy is in the cache is shown with its outputs, any other without outputs, and
the build does not fail. ``STEADYLOOP_NOTEBOOK_CACHE`` moves the cache (default
``.cache/notebooks`` in the repository).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
FORMAT = "steadyloop-notebook-cache/2"
REFRESH = "uv run pytest notebooks"
"""The command that executes the notebooks (through nbmake) into the cache."""

log = logging.getLogger("mkdocs.hooks.notebook_cache")


class NotebookNotExecuted(Exception):
    """A notebook has no current executed copy: names it and the command that refreshes it."""


def fast_mode() -> bool:
    """True when ``STEADYLOOP_DOCS_FAST`` asks for a build without notebook execution."""
    return os.environ.get("STEADYLOOP_DOCS_FAST", "").lower() in {"1", "true", "yes"}


def cache_dir() -> Path:
    """Where executed copies are kept."""
    return Path(os.environ.get("STEADYLOOP_NOTEBOOK_CACHE") or ROOT / ".cache" / "notebooks")


def environment_digest() -> bytes:
    """The part of the key that every notebook shares: library source and environment."""
    h = hashlib.sha256(FORMAT.encode())
    h.update(sys.version.encode())
    dists = sorted(
        f"{d.metadata['Name']}=={d.version}".lower()
        for d in importlib.metadata.distributions()
        if d.metadata["Name"]
    )
    h.update("\n".join(dists).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    for path in sorted(SRC.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            h.update(path.relative_to(SRC).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.digest()


def shown(path: Path) -> str:
    """A path as an error message names it: relative to the repository when inside it."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def notebook_key(notebook: Path, environment: bytes | None = None) -> str:
    """The cache key of ``notebook`` with the current source tree and environment."""
    h = hashlib.sha256(environment if environment is not None else environment_digest())
    h.update(notebook.read_bytes())
    return h.hexdigest()


def _cache_name(notebook: Path) -> str:
    """A readable, unique-per-source prefix: ``en-quickstart-<hash of the real path>``."""
    real = notebook.resolve()
    where = hashlib.sha256(str(real).encode()).hexdigest()[:8]
    return f"{real.parent.name}-{real.stem}-{where}"


def cached_path(notebook: Path, key: str) -> Path:
    """The file an executed copy of ``notebook`` with ``key`` is stored in."""
    return cache_dir() / f"{_cache_name(notebook)}-{key[:24]}" / notebook.name


def _entry(notebook: Path, key: str) -> Path:
    return cache_dir() / f"{_cache_name(notebook)}-{key[:24]}"


def staged_path(notebook: Path, key: str) -> Path:
    """Where nbmake executes the copy of ``notebook`` with ``key`` (its kernel's folder)."""
    return _entry(notebook, key) / "run" / notebook.name


def stage(notebook: Path, key: str) -> Path:
    """Copy the source of ``notebook`` to its staging place, for nbmake to run and overwrite."""
    target = staged_path(notebook, key)
    if target.parent.exists():
        shutil.rmtree(target.parent)  # what a failed or interrupted run left
    target.parent.mkdir(parents=True)
    shutil.copyfile(notebook.resolve(), target)
    return target


def _unexecuted_cells(path: Path) -> list[int]:
    """Indexes of the code cells of ``path`` that hold code but were never executed."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        i
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code"
        and "".join(cell["source"]).strip()
        and cell.get("execution_count") is None
    ]


def promote(notebook: Path, key: str) -> Path:
    """Keep the staged copy nbmake executed as the executed copy; drop stale ones.

    Raises:
        NotebookNotExecuted: the staged copy has code cells without an execution count,
            so nbmake did not write its outputs back (``--overwrite`` is off).
    """
    staged = staged_path(notebook, key)
    unexecuted = _unexecuted_cells(staged)
    if unexecuted:
        raise NotebookNotExecuted(
            f"{shown(notebook)}: nbmake passed, but code cells {unexecuted} of its staged copy "
            f"{shown(staged)} have no outputs (was --overwrite turned off?)"
        )
    target = cached_path(notebook, key)
    os.replace(staged, target)
    shutil.rmtree(staged.parent)
    for stale in cache_dir().glob(f"{_cache_name(notebook)}-*"):
        if stale != target.parent:
            shutil.rmtree(stale)
    return target


def _stale(notebook: Path) -> list[Path]:
    """Executed copies of ``notebook`` kept for an older key."""
    return sorted(cache_dir().glob(f"{_cache_name(notebook)}-*/{notebook.name}"))


def find_each(notebooks: Iterable[Path]) -> dict[Path, Path | None]:
    """Map each notebook to its executed copy for the current key, or to None."""
    environment = environment_digest()
    found: dict[Path, Path | None] = {}
    for notebook in notebooks:
        path = cached_path(notebook, notebook_key(notebook, environment))
        found[notebook] = path if path.is_file() else None
    return found


def find_all(notebooks: Iterable[Path]) -> dict[Path, Path]:
    """The current executed copy of every notebook; raise naming each one that lacks it.

    Raises:
        NotebookNotExecuted: a notebook has no executed copy, or only a stale one.
    """
    found = find_each(notebooks)
    lacking = [notebook for notebook, path in found.items() if path is None]
    if lacking:
        lines = []
        for notebook in lacking:
            why = (
                "stale: the notebook, src/, pyproject.toml or the installed packages changed "
                "since nbmake executed it"
                if _stale(notebook)
                else "never executed (or its last run failed)"
            )
            lines.append(f"  {shown(notebook.resolve())}: {why}")
        refresh = " ".join(shown(notebook.resolve()) for notebook in lacking)
        raise NotebookNotExecuted(
            "the docs build executes no notebook; it renders the copies nbmake executed, and "
            "these have no current one:\n"
            + "\n".join(lines)
            + f"\nRun `{REFRESH}` (or `uv run pytest {refresh}`), then build again."
        )
    return {notebook: path for notebook, path in found.items() if path is not None}


# -- MkDocs hook events -------------------------------------------------------------------


def on_config(config: Any) -> Any:
    """Say so when fast mode is on (``mkdocs serve --dirty --no-strict``, see README)."""
    if fast_mode():
        log.info(
            "Fast mode (STEADYLOOP_DOCS_FAST=1): a notebook without a current executed copy "
            "is shown without outputs"
        )
    return config


_executed: dict[str, Path] = {}  # abs_src_path of a notebook page -> executed copy
_sources: dict[str, str] = {}  # src_uri -> the page's own source, restored after render


def on_files(files: Any, config: Any) -> Any:
    """Find the executed copy of every notebook of the site; fail on a missing or stale one."""
    from mkdocs.exceptions import PluginError

    notebooks = {
        f.abs_src_path: Path(f.abs_src_path)
        for f in files
        if f.abs_src_path and f.src_uri.endswith(".ipynb")
    }
    _executed.clear()
    if fast_mode():
        for src, path in find_each(notebooks.values()).items():
            if path is None:
                log.info("Fast mode: %s is shown without outputs (no current executed copy)", src)
            else:
                _executed[str(src)] = path
        return files
    try:
        found = find_all(notebooks.values())
    except NotebookNotExecuted as exc:
        raise PluginError(f"notebook_cache: {exc}") from exc
    for src, path in found.items():
        _executed[str(src)] = path
    return files


def on_serve(server: Any, config: Any, builder: Any) -> Any:
    """``mkdocs serve`` rebuilds when nbmake keeps a new executed copy, too."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    server.watch(str(cache_dir()))
    return server


def on_pre_page(page: Any, config: Any, files: Any) -> Any:
    """Render a notebook page from its executed copy."""
    src = page.file.abs_src_path
    if src in _executed:
        _sources[page.file.src_uri] = src
        page.file.abs_src_path = str(_executed[src])
    return page


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    """Point the page at its source again (the download link copies the source)."""
    original = _sources.pop(page.file.src_uri, None)
    if original is not None:
        page.file.abs_src_path = original
    return html


def manifest() -> dict[str, Any]:
    """What is cached, for debugging: ``python hooks/notebook_cache.py``."""
    return {
        "cache": str(cache_dir()),
        "entries": sorted(
            p.relative_to(cache_dir()).as_posix() for p in cache_dir().rglob("*.ipynb")
        ),
    }


def main(argv: list[str]) -> int:
    """``python hooks/notebook_cache.py [NOTEBOOK ...]``: what is cached.

    With notebooks, say for each whether it has a current executed copy; exit 1 when one
    lacks it. Without, print every cached entry.
    """
    if not argv:
        print(json.dumps(manifest(), indent=2))
        return 0
    try:
        found = find_all(Path(a) for a in argv)
    except NotebookNotExecuted as exc:
        print(exc, file=sys.stderr)
        return 1
    for notebook, path in found.items():
        print(f"{shown(notebook)}: {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
