"""The guard how-to's example files run, and do what the guide says after a crash."""

from __future__ import annotations

import re
import sqlite3
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
    """The English and Chinese guides show the same example files, byte for byte."""
    names = {"shop_graph.py", "shop_tools.py", "shop_agent.py", "shop_pydantic.py"}
    assert set(example_files("en")) == names
    assert example_files("zh") == example_files("en")


@pytest.mark.parametrize(
    ("name", "lost", "effect", "answer"),
    [
        ("shop_graph.py", "checkpoints.db", "charging o-17", "receipt for o-17"),
        ("shop_tools.py", "checkpoints.db", "charging o-18", "Both orders are charged."),
        ("shop_agent.py", "conversations.db", "refunding o-17", "Order o-17 is refunded."),
        ("shop_pydantic.py", "history.json", "charging o-17", "Order o-17 is charged."),
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


def _lose_the_result(effects_db: Path, tool: str) -> None:
    """Leave the journal as a death between the effect and its result does: the intent, no result."""
    with sqlite3.connect(effects_db) as db:
        intents = [
            row[0]
            for row in db.execute(
                "SELECT json_extract(data, '$.payload.intent_id') FROM steadyloop_records "
                "WHERE json_extract(data, '$.kind') = 'effect.intent' "
                "AND json_extract(data, '$.payload.tool') = ?",
                (tool,),
            )
        ]
        assert intents, f"no intent of {tool}"
        for intent in intents:
            db.execute(
                "DELETE FROM steadyloop_records WHERE json_extract(data, '$.kind') = "
                "'effect.result' AND json_extract(data, '$.payload.intent_id') = ?",
                (intent,),
            )
        db.execute(
            "UPDATE steadyloop_streams SET head = (SELECT max(seq) FROM steadyloop_records r "
            "WHERE r.namespace = steadyloop_streams.namespace "
            "AND r.stream = steadyloop_streams.stream)"
        )


# example file, the framework store it loses, the NEVER tool, the provider's records,
# what the tool prints when it acts, the answer the run ends with, and its effects
EXAMPLES = {
    "langgraph": (
        "shop_graph.py",
        "checkpoints.db",
        "charge",
        "payments.jsonl",
        "charging",
        "receipt for o-17",
        1,
    ),
    "langgraph-toolnode": (
        "shop_tools.py",
        "checkpoints.db",
        "charge",
        "payments.jsonl",
        "charging",
        "Both orders are charged.",
        2,
    ),
    "openai-agents": (
        "shop_agent.py",
        "conversations.db",
        "refund",
        "refunds.jsonl",
        "refunding",
        "Order o-17 is refunded.",
        1,
    ),
    "pydantic-ai": (
        "shop_pydantic.py",
        "history.json",
        "charge",
        "charges.jsonl",
        "charging",
        "Order o-17 is charged.",
        1,
    ),
}


@pytest.mark.parametrize("acted", [True, False], ids=["provider-acted", "provider-did-not"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_an_unknown_effect_is_decided_by_looking_it_up(
    tmp_path: Path, example: str, acted: bool
) -> None:
    """After a death between intent and result, the how-to's decision finds the effect at the provider: it acts exactly once either way."""
    name, lost, tool, provider, effect, answer, effects = EXAMPLES[example]
    (tmp_path / name).write_text(example_files("en")[name], encoding="utf-8")
    run(tmp_path, name)
    _lose_the_result(tmp_path / "effects.db", tool)
    (tmp_path / lost).unlink()
    if not acted:  # the process died before the provider acted
        (tmp_path / provider).unlink()
    again = run(tmp_path, name)
    assert "unknown:" in again  # the guard asked instead of guessing
    assert (effect in again) is not acted
    assert answer in again
    records = (tmp_path / provider).read_text(encoding="utf-8").splitlines()
    assert len(records) == effects, records
