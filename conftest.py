"""nbmake runs the notebooks, once per source state, into the cache the docs build reads.

``--nbmake`` is in the default options, so ``uv run pytest`` (and ``uv run pytest
notebooks``) collects every ``notebooks/{en,zh}/*.ipynb`` as an nbmake test. Here each
nbmake test is pointed at a copy of its notebook, staged in the executed-notebook cache
(``hooks/notebook_cache.py``) under a key of the notebook, ``src/`` and the environment,
and nbmake's ``--overwrite`` is turned on: nbmake writes the executed notebook into that
copy, never into the committed source. When the test passes, the copy becomes the
notebook's executed copy, which the docs build renders without executing anything.

A notebook that fails keeps no executed copy; its staged copy, with the outputs up to
the failing cell, stays for a look (the failure report names it). A notebook that
already has a current executed copy passed in this state: its test is
skipped, saying so, and nothing runs. Delete ``.cache/notebooks`` to run them all again.
The notebook tests run first, so the docs tests of the same run find their copies.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Generator
from pathlib import Path
from types import ModuleType

import pytest

_HOOK = Path(__file__).parent / "hooks" / "notebook_cache.py"
_KEY = pytest.StashKey[tuple[Path, str]]()
NOTEBOOK_TIMEOUT_SECONDS = 1200
"""pytest-timeout's limit for one notebook test (the slowest took 97 s at load 8)."""


def _cache() -> ModuleType:
    """``hooks/notebook_cache.py``, loaded once (it is no package)."""
    name = "steadyloop_notebook_cache"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _HOOK)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _is_nbmake(item: pytest.Item) -> bool:
    """Whether ``item`` is an nbmake notebook test (nbmake marks its items so)."""
    return getattr(item, "nbmake", False) is True


def pytest_configure(config: pytest.Config) -> None:
    """With nbmake on, nbmake writes outputs back: into the staged copies only (see below)."""
    if config.getoption("nbmake", default=False):
        config.option.overwrite = True


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Key each notebook test; skip those already executed in this state; run them first."""
    notebooks = [item for item in items if _is_nbmake(item)]
    if not notebooks:
        return
    cache = _cache()
    environment = cache.environment_digest()
    for item in notebooks:
        source = Path(item.filename)  # type: ignore[attr-defined]
        key = cache.notebook_key(source, environment)
        item.stash[_KEY] = (source, key)
        # nbmake limits each cell (--nbmake-timeout, 300 s); a notebook has many cells.
        item.add_marker(pytest.mark.timeout(NOTEBOOK_TIMEOUT_SECONDS))
        executed = cache.cached_path(source, key)
        if executed.is_file():
            item.add_marker(
                pytest.mark.skip(reason=f"executed in this state already: {cache.shown(executed)}")
            )
    items[:] = notebooks + [item for item in items if not _is_nbmake(item)]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Point the nbmake test at a fresh staged copy of its notebook."""
    if _KEY in item.stash:
        source, key = item.stash[_KEY]
        item.filename = str(_cache().stage(source, key))  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A notebook that passed keeps its executed copy for the docs build."""
    report = yield
    if call.when != "call" or _KEY not in item.stash:
        return report
    source, key = item.stash[_KEY]
    cache = _cache()
    if report.passed:
        try:
            cache.promote(source, key)
        except cache.NotebookNotExecuted as exc:  # nbmake did not write back: fail
            report.outcome = "failed"
            report.longrepr = str(exc)
    elif report.failed:
        staged = cache.shown(cache.staged_path(source, key))
        report.sections.append(("executed copy", f"outputs up to the failing cell: {staged}"))
    return report
