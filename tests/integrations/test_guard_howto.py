"""The guard how-to's example files run, and do what the guide says after a crash."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[2] / "docs"
_FILE_BLOCK = re.compile(r"^```python\n# (?P<name>[\w.-]+\.py)\n(?P<code>.*?)^```", re.S | re.M)


def example_files(language: str) -> dict[str, str]:
    text = (DOCS / language / "how-to" / "guard-existing-agents.md").read_text(encoding="utf-8")
    return {m["name"]: f"# {m['name']}\n{m['code']}" for m in _FILE_BLOCK.finditer(text)}


def run(folder: Path, name: str) -> str:
    proc = subprocess.run(
        [sys.executable, name], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_both_languages_show_the_same_files() -> None:
    """The English and Chinese guides show the same two example files, byte for byte."""
    assert set(example_files("en")) == {"shop_graph.py", "shop_agent.py"}
    assert example_files("zh") == example_files("en")


@pytest.mark.parametrize(
    ("name", "lost", "effect", "answer"),
    [
        ("shop_graph.py", "checkpoints.db", "charging o-17", "receipt for o-17"),
        ("shop_agent.py", "conversations.db", "refunding o-17", "Order o-17 is refunded."),
    ],
)
def test_a_lost_store_does_not_repeat_the_effect(
    tmp_path: Path, name: str, lost: str, effect: str, answer: str
) -> None:
    """With the framework's store lost, the example runs again and answers without acting twice."""
    (tmp_path / name).write_text(example_files("en")[name], encoding="utf-8")
    first = run(tmp_path, name)
    assert effect in first
    assert answer in first
    (tmp_path / lost).unlink()  # the framework forgets everything; the guard's journal stays
    again = run(tmp_path, name)
    assert effect not in again
    assert answer in again
