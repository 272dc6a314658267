"""The CLI reference explains every code `journal doctor` reports, in both languages."""

from __future__ import annotations

import inspect
import re

import pytest
from docs_support import DOCS

from steadyloop.cli import _journal


def _codes() -> set[str]:
    """The finding codes the doctor's source can report."""
    source = inspect.getsource(_journal)
    return set(re.findall(r'Finding\(\s*"(?:error|warning)",\s*"([a-z-]+)"', source))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_doctor_code_is_explained_in_the_cli_reference(lang: str) -> None:
    """Each code has a row in the doctor table, and snapshot-mismatch its own paragraph."""
    text = (DOCS / lang / "reference" / "cli.md").read_text(encoding="utf-8")
    section = text.split("{#doctor}", 1)[1].split("\n## ", 1)[0]
    codes = _codes()
    assert {"corruption", "snapshot-mismatch", "open-intent"} <= codes
    rows = set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))
    assert rows == codes
    assert re.search(r"^\*\*`snapshot-mismatch`[.。]\*\*", section, re.M)
