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
from docs_support import BUILD_TIMEOUT, ROOT, BuiltSite, build_env


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> BuiltSite:
    """Build the whole site, both languages and every notebook, once, strictly."""
    out = tmp_path_factory.mktemp("site") / "site"
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
    cmd += ["-d", str(out)]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    seconds = time.perf_counter() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed ({proc.returncode}):\n{log[-6000:]}")
    return BuiltSite(root=out, seconds=seconds, log=log)
