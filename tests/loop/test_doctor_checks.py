"""``journal doctor`` on runs: checksums, unchecked old files, and results vs. session copies."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import zlib
from pathlib import Path

import pytest
from loop_helpers import APP, counting_agent
from typer.testing import CliRunner

from steadyloop import CorruptionError
from steadyloop.cli import _common, app
from steadyloop.journal import namespace_filename, open_journal
from steadyloop.loop import Budgets, resume, run

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)


def crashed_run(tmp_path: Path) -> Path:
    """A JSONL journal holding a 4-step run cut short after step 2; returns its file."""

    async def go() -> None:
        async with await open_journal(f"jsonl://{tmp_path}") as journal:
            agent = dataclasses.replace(counting_agent(4), budgets=Budgets(max_steps=2))
            await run(agent, journal, APP, "ada", "s1", "r1", "go")

    asyncio.run(go())
    return tmp_path / namespace_filename(APP)


def doctor(tmp_path: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["journal", "doctor", f"jsonl://{tmp_path}"])
    return result.exit_code, result.output + (result.stderr or "")


def recheck(lines: list[str], at: int) -> None:
    """Recompute the check of the batch ending at line index ``at`` (an editor's forgery)."""
    start = at
    while start > 1 and json.loads(lines[start])["index"] != 0:
        start -= 1
    body = [*lines[start:at], re.sub(r',"check":"[0-9a-f]{8}"', "", lines[at])]
    crc = f"{zlib.crc32(''.join(body).encode()):08x}"
    lines[at] = re.sub(r'"check":"[0-9a-f]{8}"', f'"check":"{crc}"', lines[at])


def test_an_edited_result_in_a_jsonl_run_is_caught_by_doctor_and_by_resume(
    tmp_path: Path,
) -> None:
    """An edit of "sent":1 to "sent":9 in the run's file: doctor exits 1, resume refuses it."""
    path = crashed_run(tmp_path)
    text = path.read_text()
    assert text.count('"value":{"sent":1}') == 1
    path.write_text(text.replace('"value":{"sent":1}', '"value":{"sent":9}'))
    code, out = doctor(tmp_path)
    assert code == 1, out
    assert "does not match its check" in out and str(path) in out

    async def again() -> None:
        async with await open_journal(f"jsonl://{tmp_path}") as journal:
            with pytest.raises(CorruptionError, match="does not match its check"):
                await resume(counting_agent(4), journal, APP, "r1")

    asyncio.run(again())


def test_doctor_says_a_file_written_before_checksums_is_unchecked(tmp_path: Path) -> None:
    """A version 1 file passes doctor (exit 0) with a warning that it is unchecked."""
    path = crashed_run(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"version":2', '"version":1')
    path.write_text("".join(re.sub(r',"check":"[0-9a-f]{8}"', "", x) for x in lines))
    code, out = doctor(tmp_path)
    assert code == 0, out
    assert "unchecked" in out and "written before checksums" in out


def test_doctor_finds_a_result_that_differs_from_its_session_copy(tmp_path: Path) -> None:
    """An edit with a recomputed check still shows: the run and its session disagree."""
    path = crashed_run(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    (at,) = [i for i, x in enumerate(lines) if '"type":"tool_result"' in x and '"sent":1}' in x]
    lines[at] = lines[at].replace('"response":{"sent":1}', '"response":{"sent":9}')
    end = at
    while '"check":' not in lines[end]:
        end += 1
    recheck(lines, end)
    path.write_text("".join(lines))
    code, out = doctor(tmp_path)
    assert code == 1, out
    assert "copy-mismatch" in out and "'r1/2'" in out and '{"sent":9}' in out
    assert f"{APP}/" in out and "run" in out


def test_doctor_passes_an_untouched_run(tmp_path: Path) -> None:
    """A run as written has no findings beyond its (none) open intents."""
    crashed_run(tmp_path)
    code, out = doctor(tmp_path)
    assert code == 0, out
    assert "no problems" in out


def test_doctor_finds_a_forged_intent_argument_with_its_check_recomputed(tmp_path: Path) -> None:
    """A tool intent's arguments edited, the batch check recomputed: doctor still exits 1.

    No checksum can see this forgery; the intent no longer asks for the tool call the
    model's reply made, and doctor compares the two records.
    """
    path = crashed_run(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    (at,) = [
        i
        for i, x in enumerate(lines)
        if '"kind":"effect.intent"' in x and '"arguments":{"n":2}' in x and '"what":"tool"' in x
    ]
    lines[at] = lines[at].replace('"arguments":{"n":2}', '"arguments":{"n":7}')
    end = at
    while '"check":' not in lines[end]:
        end += 1
    recheck(lines, end)
    path.write_text("".join(lines))
    code, out = doctor(tmp_path)
    assert code == 1, out
    assert "intent-mismatch" in out and "'r1/" in out
    assert 'arguments {"n":7} where the reply has {"n":2}' in out
