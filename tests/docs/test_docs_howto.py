"""The how-to guides stay true: their example files run, and their quotes match the code."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_support import DOCS, build_env

BACKEND_HOWTO = DOCS / "en" / "how-to" / "write-a-backend.md"
SERVERS_HOWTO = DOCS / "en" / "how-to" / "server-backends.md"

# A fenced block whose first line names a file: "# dict_journal.py", "# pyproject.toml".
_FILE_BLOCK = re.compile(
    r"^```(?:python|toml)\n# (?P<name>[\w.-]+\.(?:py|toml))\n(?P<code>.*?)^```", re.S | re.M
)


def example_files(page: Path) -> dict[str, str]:
    """The files a page shows, by name, each exactly as the page prints it."""
    text = page.read_text(encoding="utf-8")
    return {m["name"]: f"# {m['name']}\n{m['code']}" for m in _FILE_BLOCK.finditer(text)}


def test_backend_howto_shows_its_files() -> None:
    """The guide shows a backend module, its test module and the pytest setting."""
    assert set(example_files(BACKEND_HOWTO)) == {
        "dict_journal.py",
        "test_dict_journal.py",
        "pyproject.toml",
    }


@pytest.mark.slow
def test_backend_howto_passes_the_conformance_suite(tmp_path: Path) -> None:
    """The guide's dict backend, run as the guide says, passes every conformance test.

    Only the multi-process test is skipped, for the reason the guide gives: the store
    lives in one process. Warnings are errors, so the guide's setup is clean too.
    """
    from steadyloop.testing import JournalConformance

    for name, code in example_files(BACKEND_HOWTO).items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-W", "error", "-q", "-rs"],
        cwd=tmp_path,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    tests = [n for n in dir(JournalConformance) if n.startswith("test_")]
    summary = out.strip().splitlines()[-1]
    assert f"{len(tests) - 1} passed, 1 skipped" in summary, summary
    assert "no URL to share" in out


# -- quotes of the backends' durability statements ------------------------------------

SERVER_MODULES = [
    "steadyloop.journal._postgres",
    "steadyloop.journal._redis",
    "steadyloop.journal._mysql",
]


def _normalise(text: str) -> str:
    """Docstring reST and page Markdown in one form: roles dropped, one kind of quote."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    text = text.replace("``", "`").replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def blockquotes(page: Path) -> list[str]:
    """The text of each blockquote of a page."""
    quotes: list[list[str]] = []
    previous_was_quote = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(">"):
            if not previous_was_quote:
                quotes.append([])
            quotes[-1].append(line[1:].strip())
            previous_was_quote = True
        else:
            previous_was_quote = False
    return [" ".join(q) for q in quotes]


def test_durability_quotes_are_word_for_word() -> None:
    """Each server backend's durability statement is quoted exactly from its docstring."""
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    pytest.importorskip("asyncmy")
    docstrings = {m: _normalise(importlib.import_module(m).__doc__ or "") for m in SERVER_MODULES}
    quoted: dict[str, str] = {}
    for quote in blockquotes(SERVERS_HOWTO):
        text = _normalise(quote)
        sources = [m for m, doc in docstrings.items() if text in doc]
        assert sources, f"not a quote of any backend docstring: {text[:200]}"
        quoted[sources[0]] = text
    assert set(quoted) == set(SERVER_MODULES)
    for module, text in quoted.items():
        assert text.startswith("Durability"), module
