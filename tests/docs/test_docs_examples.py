"""Every Python example in the docs compiles, and every complete script runs as written."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from docs_support import DEFAULT_LANGUAGE, DOCS, markdown_pages

# Indented too: a block in a content tab (pymdownx.tabbed) is indented under its tab.
_BLOCK = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)


def python_blocks() -> list[tuple[str, int, str]]:
    blocks = []
    for page in markdown_pages(DEFAULT_LANGUAGE):
        text = (DOCS / DEFAULT_LANGUAGE / page).read_text(encoding="utf-8")
        for n, match in enumerate(_BLOCK.finditer(text), start=1):
            blocks.append((page, n, textwrap.dedent(match["code"])))
    return blocks


BLOCKS = python_blocks()


@pytest.mark.parametrize(("page", "n", "code"), BLOCKS, ids=[f"{p}#{n}" for p, n, _ in BLOCKS])
def test_example_compiles(page: str, n: int, code: str) -> None:
    """Snippets may use top-level await, as in a notebook; otherwise they are valid Python."""
    compile(code, f"{page}#{n}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


SCRIPTS = [(p, n, c) for p, n, c in BLOCKS if "asyncio.run(" in c]


@pytest.mark.parametrize(("page", "n", "code"), SCRIPTS, ids=[f"{p}#{n}" for p, n, _ in SCRIPTS])
def test_complete_script_runs(page: str, n: int, code: str, tmp_path: Path) -> None:
    """A block that is a whole program runs, twice, in an empty folder, without error."""
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
    assert SCRIPTS, "no runnable example found"
