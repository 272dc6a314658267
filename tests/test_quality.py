"""Lint and type gates run as part of the test suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed in the test environment")
    return found


def test_ruff_finds_nothing() -> None:
    """Ruff's lint rules pass on the whole repository."""
    out = _run(_tool("ruff"), "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_code_is_formatted() -> None:
    """Every Python file is formatted as ruff format would write it."""
    out = _run(_tool("ruff"), "format", "--check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_passes_on_src() -> None:
    """Mypy in strict mode finds no error in src/."""
    out = _run(_tool("mypy"))
    assert out.returncode == 0, out.stdout + out.stderr
