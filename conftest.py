"""Notebooks as tests, executed once per source state through the docs build's cache.

``notebooks/**/*.ipynb`` are collected here (this replaces ``--nbmake`` in the default
options). Each notebook is executed by ``hooks/notebook_cache.py``, the same code the
docs build uses, so a test run executes every notebook once: whichever of the notebook
tests and the docs build (``tests/docs``) comes first stores the executed copy, keyed
on the notebook, ``src/`` and the environment, and the other reuses it. The first
notebook test executes every collected notebook that is not cached, in parallel; each
test then reports its own notebook's result (the failing cell and its error).
``pytest --nbmake notebooks/`` still runs nbmake instead.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_HOOK = Path(__file__).parent / "hooks" / "notebook_cache.py"


def _cache() -> ModuleType:
    name = "steadyloop_notebook_cache"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _HOOK)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect a notebook as one test, unless nbmake was asked for."""
    if (
        file_path.suffix == ".ipynb"
        and ".ipynb_checkpoints" not in file_path.parts
        and not parent.config.getoption("nbmake", default=False)
    ):
        notebook: NotebookFile = NotebookFile.from_parent(parent, path=file_path)
        return notebook
    return None


class NotebookFile(pytest.File):
    """A notebook file: one test."""

    def collect(self) -> Any:
        """The notebook's one test."""
        yield NotebookItem.from_parent(self, name=self.path.name)


_results: dict[Path, Any] = {}


class NotebookItem(pytest.Item):
    """Runs top to bottom in its own folder with no cell raising (cached when unchanged)."""

    def runtest(self) -> None:
        """Execute the notebooks not yet run (all at once, in parallel); report this one."""
        if self.path not in _results:
            todo = [
                item.path
                for item in self.session.items
                if isinstance(item, NotebookItem) and item.path not in _results
            ]
            _results.update(_cache().execute_each(todo))
        result = _results[self.path]
        if isinstance(result, BaseException):
            raise result

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        """A failed notebook shows its failing cell and error, not this file's traceback."""
        if isinstance(excinfo.value, _cache().NotebookFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where the test is, for pytest's report."""
        return self.path, 0, f"notebook {self.path.name}"
