"""nbmake executes each notebook once per source state; the docs build only reads the copies."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import yaml
from docs_support import ROOT

HOOK = ROOT / "hooks" / "notebook_cache.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _load(HOOK, "notebook_cache_under_test")
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.setattr(module, "SRC", src)
    monkeypatch.setenv("STEADYLOOP_NOTEBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("STEADYLOOP_DOCS_FAST", raising=False)
    return module


def notebook(path: Path, *sources: str, executed: bool = False) -> Path:
    cells = [
        {
            "cell_type": "code",
            "id": f"cell-{i}",
            "metadata": {},
            "source": s,
            "outputs": [],
            "execution_count": i + 1 if executed else None,
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
    path.parent.mkdir(parents=True, exist_ok=True)
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


def test_build_reads_the_promoted_copy_and_names_a_stale_one(
    cache: ModuleType, tmp_path: Path
) -> None:
    """The build finds the copy kept after a pass; a changed source fails it naming the notebook and the command."""
    nb = notebook(tmp_path / "en" / "a.ipynb", "print(1)")
    with pytest.raises(cache.NotebookNotExecuted, match="never executed") as missing:
        cache.find_all([nb])
    assert "a.ipynb" in str(missing.value) and "uv run pytest notebooks" in str(missing.value)

    key = cache.notebook_key(nb)
    staged = cache.stage(nb, key)
    assert staged.read_bytes() == nb.read_bytes()
    notebook(staged, "print(1)", executed=True)  # what nbmake --overwrite leaves
    kept = cache.promote(nb, key)
    assert cache.find_all([nb]) == {nb: kept}
    assert not staged.exists()

    notebook(nb, "print('changed')")
    with pytest.raises(cache.NotebookNotExecuted) as stale:
        cache.find_all([nb])
    message = str(stale.value)
    assert "a.ipynb: stale" in message and "uv run pytest notebooks" in message


def test_an_unexecuted_copy_is_never_kept(cache: ModuleType, tmp_path: Path) -> None:
    """A staged copy without execution counts (nbmake did not write back) is refused."""
    nb = notebook(tmp_path / "b.ipynb", "x = 1", "")
    key = cache.notebook_key(nb)
    cache.stage(nb, key)
    with pytest.raises(cache.NotebookNotExecuted, match=r"cells \[0\]"):
        cache.promote(nb, key)
    assert cache.find_each([nb]) == {nb: None}


def test_build_fails_on_a_missing_copy_unless_in_fast_mode(
    cache: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """on_files stops the build on a notebook without a copy; fast mode shows it without outputs."""
    from mkdocs.exceptions import PluginError

    nb = notebook(tmp_path / "zh" / "c.ipynb", "print(1)")
    files = [SimpleNamespace(abs_src_path=str(nb), src_uri="zh/c.ipynb")]
    with pytest.raises(PluginError, match=r"c\.ipynb: never executed"):
        cache.on_files(files, config=None)
    monkeypatch.setenv("STEADYLOOP_DOCS_FAST", "1")
    assert cache.on_files(files, config=None) is files


def test_serve_watches_the_cache(cache: ModuleType, tmp_path: Path) -> None:
    """The served site rebuilds when nbmake keeps a new executed copy."""
    watched: list[str] = []
    server = SimpleNamespace(watch=watched.append)
    assert cache.on_serve(server, config=None, builder=None) is server
    assert watched == [str(tmp_path / "cache")] and (tmp_path / "cache").is_dir()


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_docs_build_executes_no_notebook() -> None:
    """No hook imports a notebook executor, and mkdocs-jupyter is told not to execute."""
    executors = ("nbclient", "nbconvert.preprocessors", "jupyter_client", "papermill")
    for hook in sorted((ROOT / "hooks").glob("*.py")):
        used = [n for n in _imports(hook) if n.startswith(executors)]
        assert used == [], f"{hook.name} imports {used}"
    from mkdocs.utils.yaml import get_yaml_loader

    with (ROOT / "mkdocs.yml").open(encoding="utf-8") as config:
        plugins = yaml.load(config, Loader=get_yaml_loader())["plugins"]
    [jupyter] = [
        p["mkdocs-jupyter"] for p in plugins if isinstance(p, dict) and "mkdocs-jupyter" in p
    ]
    assert jupyter["execute"] is False


# -- end to end: a small project with this project's conftest, hook and pytest options --

AFTER = '''
from pathlib import Path
import os


def test_runs_after_the_notebooks():
    """The notebook tests ran before this one, which testpaths lists first."""
    assert list(Path(os.environ["STEADYLOOP_NOTEBOOK_CACHE"]).glob("*/a.ipynb"))
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's test setup with one notebook of its own."""
    root = tmp_path / "project"
    (root / "hooks").mkdir(parents=True)
    shutil.copy(ROOT / "conftest.py", root / "conftest.py")
    shutil.copy(HOOK, root / "hooks" / "notebook_cache.py")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "src").mkdir()
    (root / "src" / "mod.py").write_text("X = 1\n", encoding="utf-8")
    (root / "tests").mkdir()
    (root / "tests" / "test_after.py").write_text(AFTER, encoding="utf-8")
    notebook(root / "notebooks" / "en" / "a.ipynb", "import os\nprint(os.getcwd())")
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["STEADYLOOP_NOTEBOOK_CACHE"] = str(root / ".cache" / "notebooks")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.slow
def test_nbmake_executes_each_state_once_and_the_build_reads_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain pytest runs the notebook in nbmake into the cache, once; the build reads that copy until the source changes."""
    source = project / "notebooks" / "en" / "a.ipynb"
    committed = source.read_bytes()
    first = _pytest(project)
    log = first.stdout + first.stderr
    assert first.returncode == 0, log
    assert "nbmake" in log and "2 passed" in log, log
    assert source.read_bytes() == committed, "the committed notebook got outputs"
    [executed] = (project / ".cache" / "notebooks").glob("*/a.ipynb")
    cell = json.loads(executed.read_text(encoding="utf-8"))["cells"][0]
    assert cell["execution_count"] == 1 and cell["outputs"], "no outputs in the executed copy"
    stamp = executed.stat().st_mtime_ns

    second = _pytest(project, "notebooks")
    assert second.returncode == 0 and "executed in this state already" in second.stdout, (
        second.stdout + second.stderr
    )
    assert executed.stat().st_mtime_ns == stamp, "the notebook ran again"

    monkeypatch.setenv("STEADYLOOP_NOTEBOOK_CACHE", str(project / ".cache" / "notebooks"))
    hook = _load(project / "hooks" / "notebook_cache.py", "notebook_cache_of_project")
    assert hook.find_all([source]) == {source: executed}
    notebook(source, "print('changed')")
    with pytest.raises(hook.NotebookNotExecuted) as stale:
        hook.find_all([source])
    assert "notebooks/en/a.ipynb: stale" in str(stale.value)
    assert "Run `uv run pytest notebooks`" in str(stale.value)


@pytest.mark.slow
def test_a_failing_notebook_keeps_no_copy(project: Path) -> None:
    """The nbmake test fails naming the error and the staged copy with its outputs; no executed copy is kept."""
    notebook(project / "notebooks" / "en" / "a.ipynb", "raise ValueError('broken on purpose')")
    run = _pytest(project, "notebooks")
    log = run.stdout + run.stderr
    assert run.returncode == 1 and "broken on purpose" in log, log
    cache = project / ".cache" / "notebooks"
    assert not list(cache.glob("*/a.ipynb")), "a failed notebook left an executed copy"
    [staged] = cache.glob("*/run/a.ipynb")
    assert "outputs up to the failing cell: .cache/notebooks/" in log, log
    outputs = json.loads(staged.read_text(encoding="utf-8"))["cells"][0]["outputs"]
    assert [o["ename"] for o in outputs if o["output_type"] == "error"] == ["ValueError"]
