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

From the command line, ``python hooks/notebook_cache.py NOTEBOOK...`` executes the
notebooks without a current copy into the cache (the docs tests do this before the
build, so the two are timed apart); with no arguments it prints what is cached.

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
import time
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
            h.update(path.relative_to(SRC).as_posix().encode() + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.digest()


def _shown(path: Path) -> str:
    """A path as an error message names it: relative to the repository when inside it."""
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


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


def _store(notebook: Path, key: str, nb: Any) -> Path:
    """Write an executed notebook to the cache atomically; drop its stale copies."""
    import nbformat

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


async def _execute_all(clients: list[tuple[str, Any]], parallel: int) -> list[str | None]:
    """Run each (name, client); return None for a success or the error text."""
    from nbclient.exceptions import CellExecutionError

    gate = asyncio.Semaphore(parallel)

    async def one(name: str, client: Any) -> str | None:
        async with gate:
            log.info("Executing notebook %s", name)
            started = time.perf_counter()
            try:
                await client.async_execute()
            except CellExecutionError as exc:
                return f"{name}: a cell failed:\n{exc}"
            except Exception as exc:  # a timeout, a dead kernel
                return f"{name}: {type(exc).__name__}: {exc}"
            log.info("Executed notebook %s in %.2f s", name, time.perf_counter() - started)
            return None

    return list(await asyncio.gather(*(one(name, client) for name, client in clients)))


def _run(missing: list[tuple[Path, str]], parallel: int) -> list[Path | NotebookFailed]:
    import nbformat
    from nbclient import NotebookClient

    prepared = []
    for notebook, _key in missing:
        real = notebook.resolve()
        nb = nbformat.read(real, as_version=4)
        client = NotebookClient(
            nb,
            timeout=CELL_TIMEOUT_SECONDS,
            kernel_name=KERNEL,
            allow_errors=False,
            resources={"metadata": {"path": str(real.parent)}},
        )
        prepared.append((_shown(real), client, nb))
    runner = asyncio.run if _no_running_loop() else _run_in_thread
    errors = runner(_execute_all([(name, client) for name, client, _ in prepared], parallel))
    results: list[Path | NotebookFailed] = []
    for (notebook, key), (_name, _client, nb), error in zip(missing, prepared, errors, strict=True):
        results.append(NotebookFailed(error) if error else _store(notebook, key, nb))
    return results


def execute_each(
    notebooks: Iterable[Path], *, execute: bool = True, parallel: int | None = None
) -> dict[Path, Path | NotebookFailed | None]:
    """Map each notebook to its executed copy, executing (in parallel) those not cached.

    A notebook that failed maps to its [NotebookFailed][]; with ``execute=False`` one
    without a current copy maps to ``None``.
    """
    environment = _environment_digest()
    found: dict[Path, Path | NotebookFailed | None] = {}
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
        for (notebook, _key), result in zip(missing, _run(missing, max(1, parallel)), strict=True):
            found[notebook] = result
    return found


def executed_all(
    notebooks: Iterable[Path], *, execute: bool = True, parallel: int | None = None
) -> dict[Path, Path | None]:
    """Like [execute_each][], but raise if any notebook failed.

    Raises:
        NotebookFailed: a cell of one or more notebooks raised, or a kernel died.
    """
    found = execute_each(notebooks, execute=execute, parallel=parallel)
    failures = [str(r) for r in found.values() if isinstance(r, NotebookFailed)]
    if failures:
        raise NotebookFailed("\n\n".join(failures))
    return {k: v for k, v in found.items() if not isinstance(v, NotebookFailed)}


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


def on_config(config: Any) -> Any:
    """Say so when fast mode is on (``mkdocs serve --dirty --no-strict``, see README)."""
    if fast_mode():
        log.info("Fast mode (STEADYLOOP_DOCS_FAST=1): notebooks are not executed")
    return config


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


def main(argv: list[str]) -> int:
    """``python hooks/notebook_cache.py [NOTEBOOK ...]``: execute notebooks into the cache.

    With notebooks, execute those without a current copy (as the build does) and
    report each failure; without, print what is cached.
    """
    if not argv:
        print(json.dumps(manifest(), indent=2))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    found = execute_each([Path(a) for a in argv])
    failures = [str(r) for r in found.values() if isinstance(r, NotebookFailed)]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
