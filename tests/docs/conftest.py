"""Shared fixtures for the documentation tests.

The site is built once per test session (``mkdocs build --strict`` into a temporary
folder) and every test that reads HTML shares that build. Tests that need the build are
marked ``slow``; ``-m "not slow"`` leaves only the quick source checks.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from docs_support import BUILD_TIMEOUT, NOTEBOOKS, ROOT, BuiltSite, build_env


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    """Build the whole site, both languages and every notebook, once, strictly.

    The notebooks are executed first, into the cache the build reads (the hook's own
    command line), so the two are timed apart: the build renders, the notebooks run.
    """
    notebooks = sorted(str(p) for p in NOTEBOOKS.glob("*/*.ipynb"))
    start = time.perf_counter()
    executed = _run([sys.executable, str(ROOT / "hooks" / "notebook_cache.py"), *notebooks])
    notebook_seconds = time.perf_counter() - start
    if executed.returncode != 0:
        pytest.fail(f"a notebook failed:\n{(executed.stdout + executed.stderr)[-6000:]}")
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
