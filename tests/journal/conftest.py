"""Fixtures for journal tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import IN_CI


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may write to: chmod for ordinary users, a read-only mount for root."""
    target = tmp_path / "read-only"
    target.mkdir()
    if os.geteuid() != 0:
        target.chmod(0o555)
        yield target
        target.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        message = f"cannot make a read-only directory as root: {mounted.stderr.strip()}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)
