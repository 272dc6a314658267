"""Execute each notebook once, keyed on everything its outputs depend on; reuse the result.

One mechanism for the docs build (this file is an MkDocs hook) and the test run (the
root ``conftest.py`` collects ``notebooks/**/*.ipynb`` as tests that call
[executed][]). Whichever runs first executes a notebook and stores the executed copy;
the other finds it. Before, ``uv run pytest`` ran every notebook in nbmake and again in
each language's build.

The key is a SHA-256 of: the notebook file, every file under ``src/`` (path and bytes),
``pyproject.toml``, the Python version and every installed distribution's name and
version. A changed notebook, a changed line of the library or an upgraded dependency
gives a new key, so an executed copy can never be stale; stale copies of the same
notebook are deleted when a new one is stored.

In the build (hook events):

* ``on_files``: every notebook of both languages is executed, up to
  ``STEADYLOOP_NOTEBOOK_JOBS`` (default 4) at once, each in its own kernel running in the
  notebook's folder; a failing cell fails the build with the notebook, the cell and the
  error. mkdocs-jupyter itself is set to ``execute: false`` and renders the executed copy.
* ``on_pre_page`` / ``on_page_content``: a notebook page is rendered from its executed
  copy; afterwards the page points at its source again, so the ``.ipynb`` offered for
  download is the committed notebook, without outputs.

``STEADYLOOP_DOCS_FAST=1`` (the fast ``mkdocs serve`` mode): nothing is executed; a
notebook whose current executed copy is in the cache is shown with its outputs, any
other without outputs. ``STEADYLOOP_NOTEBOOK_CACHE`` moves the cache (default
``.cache/notebooks`` in the repository).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
FORMAT = "steadyloop-notebook-cache/1"
CELL_TIMEOUT_SECONDS = 300
KERNEL = "python3"

log = logging.getLogger("mkdocs.hooks.notebook_cache")


class NotebookFailed(Exception):
    """A notebook cell raised: names the notebook, the cell and the error."""


def fast_mode() -> bool:
    """True when ``STEADYLOOP_DOCS_FAST`` asks for a build without notebook execution."""
    return os.environ.get("STEADYLOOP_DOCS_FAST", "").lower() in {"1", "true", "yes"}


def cache_dir() -> Path:
    """Where executed copies are kept."""
    return Path(os.environ.get("STEADYLOOP_NOTEBOOK_CACHE") or ROOT / ".cache" / "notebooks")


def _environment_digest() -> bytes:
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
            h.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.digest()


def notebook_key(notebook: Path, environment: bytes | None = None) -> str:
    """The cache key of ``notebook`` with the current source tree and environment."""
    h = hashlib.sha256(environment if environment is not None else _environment_digest())
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


async def _execute(notebook: Path, key: str) -> Path:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    real = notebook.resolve()
    nb = nbformat.read(real, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_SECONDS,
        kernel_name=KERNEL,
        allow_errors=False,
        resources={"metadata": {"path": str(real.parent)}},
    )
    try:
        await client.async_execute()
    except CellExecutionError as exc:
        raise NotebookFailed(f"{real.relative_to(ROOT)}: a cell failed:\n{exc}") from exc
    except Exception as exc:  # a timeout, a dead kernel
        raise NotebookFailed(f"{real.relative_to(ROOT)}: {type(exc).__name__}: {exc}") from exc
    target = cached_path(notebook, key)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        nbformat.write(nb, out)
    os.replace(tmp, target)
    for stale in cache_dir().glob(f"{_cache_name(notebook)}-*"):
        if stale != target.parent:
            for child in stale.iterdir():
                child.unlink()
            stale.rmdir()
    return target


async def _execute_all(jobs: list[tuple[Path, str]], parallel: int) -> list[Path]:
    gate = asyncio.Semaphore(parallel)

    async def one(notebook: Path, key: str) -> Path:
        async with gate:
            log.info("Executing notebook %s", notebook.resolve().relative_to(ROOT))
            return await _execute(notebook, key)

    results = await asyncio.gather(*(one(nb, key) for nb, key in jobs), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise NotebookFailed("\n\n".join(str(f) for f in failures))
    return [r for r in results if isinstance(r, Path)]


def executed_all(
    notebooks: Iterable[Path], *, execute: bool = True, parallel: int | None = None
) -> dict[Path, Path | None]:
    """Map each notebook to its executed copy, executing (in parallel) those not cached.

    With ``execute=False`` a notebook without a current copy maps to ``None``.

    Raises:
        NotebookFailed: a cell of one or more notebooks raised, or a kernel died.
    """
    environment = _environment_digest()
    found: dict[Path, Path | None] = {}
    missing: list[tuple[Path, str]] = []
    for notebook in notebooks:
        key = notebook_key(notebook, environment)
        path = cached_path(notebook, key)
        found[notebook] = path if path.is_file() else None
        if found[notebook] is None and execute:
            missing.append((notebook, key))
    if missing:
        if parallel is None:
            parallel = int(os.environ.get("STEADYLOOP_NOTEBOOK_JOBS") or 4)
        runner = asyncio.run if _no_running_loop() else _run_in_thread
        for (notebook, _key), path in zip(
            missing, runner(_execute_all(missing, max(1, parallel))), strict=True
        ):
            found[notebook] = path
    return found


def executed(notebook: Path) -> Path:
    """The executed copy of one notebook, executing it if it is not cached."""
    path = executed_all([notebook])[notebook]
    assert path is not None
    return path


def _no_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _run_in_thread(coro: Any) -> Any:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# -- MkDocs hook events -------------------------------------------------------------------

_executed: dict[str, Path] = {}  # abs_src_path of a notebook page -> executed copy
_sources: dict[str, str] = {}  # src_uri -> the page's own source, restored after render


def on_files(files: Any, config: Any) -> Any:
    """Execute (or find) every notebook of the site before any page is rendered."""
    from mkdocs.exceptions import PluginError

    notebooks = {
        f.abs_src_path: Path(f.abs_src_path)
        for f in files
        if f.abs_src_path and f.src_uri.endswith(".ipynb")
    }
    try:
        found = executed_all(notebooks.values(), execute=not fast_mode())
    except NotebookFailed as exc:
        raise PluginError(f"notebook_cache: {exc}") from exc
    _executed.clear()
    for src, path in found.items():
        if path is not None:
            _executed[str(src)] = path
        elif fast_mode():
            log.info("Fast mode: %s is shown without outputs (not executed)", src)
    return files


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


if __name__ == "__main__":
    print(json.dumps(manifest(), indent=2))
