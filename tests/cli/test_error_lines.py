"""Errors on stderr stay one line when stderr is not a terminal (logs, pipes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_long_error_is_one_line_on_a_pipe(tmp_path: Path) -> None:
    """An error longer than 80 columns is not wrapped when stderr is a pipe."""
    missing = tmp_path / ("a-rather-long-directory-name-" * 3) / "journal"
    proc = subprocess.run(
        [sys.executable, "-m", "steadyloop", "runs", "list", "-j", f"jsonl://{missing}"],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, proc.stderr
    assert lines[0].startswith("error: ") and "no journal here" in lines[0]
