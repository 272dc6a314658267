"""The home page's first example prints exactly the output the page shows under it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import DOCS, LANGUAGES

_SAMPLE = re.compile(
    r"^```python\n(?P<code>.*?)^```\n.*?^```text\n(?P<output>.*?)^```", re.S | re.M
)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_first_look_shows_its_real_output(lang: str, tmp_path: Path) -> None:
    """Run the "first look" sample in an empty folder; it prints the page's output block."""
    text = (DOCS / lang / "index.md").read_text(encoding="utf-8")
    section = text[text.index("{#a-first-look}") :]
    match = _SAMPLE.search(section)
    assert match, "the first look has a Python sample followed by its output"
    lines = match["code"].splitlines()
    assert max(map(len, lines)) <= 80, "a line this long is cut off on a laptop screen"
    done = subprocess.run(
        [sys.executable, "-c", match["code"]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == match["output"]
