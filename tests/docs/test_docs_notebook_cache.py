"""The executed-notebook cache: keyed so it cannot be stale, and loud when a cell fails."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from docs_support import ROOT


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "notebook_cache_under_test", ROOT / "hooks" / "notebook_cache.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.setattr(module, "SRC", src)
    monkeypatch.setenv("STEADYLOOP_NOTEBOOK_CACHE", str(tmp_path / "cache"))
    return module


def notebook(path: Path, *sources: str) -> Path:
    cells = [
        {
            "cell_type": "code",
            "id": f"cell-{i}",
            "metadata": {},
            "source": s,
            "outputs": [],
            "execution_count": None,
        }
        for i, s in enumerate(sources)
    ]
    nb = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def test_key_follows_notebook_and_source_tree(cache: ModuleType, tmp_path: Path) -> None:
    """A changed notebook or a changed file under src/ gives a new key; nothing else does."""
    nb = notebook(tmp_path / "a.ipynb", "print(1)")
    first = cache.notebook_key(nb)
    assert cache.notebook_key(nb) == first
    (cache.SRC / "pkg" / "mod.py").write_text("X = 2\n", encoding="utf-8")
    second = cache.notebook_key(nb)
    assert second != first
    notebook(nb, "print(2)")
    assert cache.notebook_key(nb) not in {first, second}


@pytest.mark.slow
def test_executes_once_then_reuses(cache: ModuleType, tmp_path: Path) -> None:
    """The first call executes and stores outputs; the second finds them without a kernel."""
    nb = notebook(tmp_path / "b.ipynb", "import os\nprint(os.getcwd())")
    path = cache.executed(nb)
    outputs = json.loads(path.read_text(encoding="utf-8"))["cells"][0]["outputs"]
    assert outputs and "".join(outputs[0]["text"]).strip() == str(tmp_path), (
        "kernel runs in the notebook's folder"
    )
    stamp = path.stat().st_mtime_ns
    assert cache.executed(nb) == path and path.stat().st_mtime_ns == stamp
    assert cache.execute_each([nb], execute=False)[nb] == path
    notebook(nb, "print('changed')")
    assert cache.execute_each([nb], execute=False)[nb] is None, "a changed notebook is not reused"


@pytest.mark.slow
def test_failing_cell_names_notebook_and_error(cache: ModuleType, tmp_path: Path) -> None:
    """A raising cell fails with the notebook, the cell source and the exception, and stores nothing."""
    nb = notebook(tmp_path / "c.ipynb", "x = 1", "raise ValueError('broken on purpose')")
    result = cache.execute_each([nb])[nb]
    assert isinstance(result, cache.NotebookFailed)
    message = str(result)
    assert "c.ipynb" in message and "ValueError" in message and "broken on purpose" in message
    assert not list((tmp_path / "cache").rglob("*.ipynb"))
