"""Shared fixtures for the documentation tests.

The site is built once per test session (``mkdocs build --strict`` into a temporary
folder) and every test that reads HTML shares that build. Tests that need the build are
marked ``slow``; ``-m "not slow"`` leaves only the quick source checks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from docs_support import (
    BUILD_TIMEOUT,
    NOTEBOOKS,
    ROOT,
    BuiltSite,
    build_env,
    load_notebook_cache,
)


@pytest.fixture(scope="session")
def built_site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> BuiltSite:
    """Build the whole site, both languages and every notebook, once, strictly.

    The build executes no notebook: it renders the copies nbmake executed. In a run that
    collects the notebook tests, they ran first and left those copies. A notebook without
    a current copy that this run does not test (``pytest tests/docs`` alone) is run here
    through nbmake first (``pytest NOTEBOOK...``), timed apart from the build. A notebook
    this run tested and that failed is not run again: the build then fails, naming it.
    """
    tested = {
        Path(str(item.path)).resolve()
        for item in request.session.items
        if getattr(item, "nbmake", False) is True
    }
    untested = [p for p in sorted(NOTEBOOKS.glob("*/*.ipynb")) if p.resolve() not in tested]
    found = load_notebook_cache().find_each(untested)
    lacking = [str(p) for p, path in found.items() if path is None]
    start = time.perf_counter()
    if lacking:
        executed = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *lacking])
        if executed.returncode != 0:
            pytest.fail(f"a notebook failed:\n{(executed.stdout + executed.stderr)[-6000:]}")
    notebook_seconds = time.perf_counter() - start
    out = tmp_path_factory.mktemp("site") / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
    start = time.perf_counter()
    proc = _run([*cmd, "-d", str(out)])
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed ({proc.returncode}):\n{log[-6000:]}")
    return BuiltSite(root=out, seconds=seconds, log=log, notebook_seconds=notebook_seconds)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=ROOT,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
