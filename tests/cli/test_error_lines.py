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


def test_postgres_connection_refused_is_one_line_without_escaped_line_breaks() -> None:
    """A PostgreSQL server that refuses: one error line, the hint of libpq joined to it."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        url = f"postgresql://postgres@127.0.0.1:{port}/test"
        proc = subprocess.run(
            [sys.executable, "-m", "steadyloop", "runs", "list", "-j", url],
            capture_output=True,
            text=True,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: {url}: cannot connect: ") and "Connection refused" in line
    assert "\\n" not in line and "\\t" not in line
    assert line.endswith(
        "Connection refused Is the server running on that host and accepting TCP/IP connections?"
    )
