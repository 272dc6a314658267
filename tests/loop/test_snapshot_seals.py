"""Sealed snapshots: a damaged one is never used; resume folds the whole stream instead."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import APP

from backends import CONNECT_TIMEOUT, server_store
from steadyloop._errors import CorruptionError
from steadyloop.journal import Journal, open_journal
from steadyloop.journal._jsonl import namespace_filename
from steadyloop.loop import (
    RUN_SNAPSHOT,
    Agent,
    Budgets,
    Message,
    ModelReply,
    ReplayPolicy,
    RunResult,
    ScriptedModel,
    ToolContext,
    ToolRegistry,
    resume,
    run,
    run_stream,
)
from steadyloop.loop import _run as run_module
from steadyloop.records import canonical_json
from steadyloop.sessions import session_stream
from steadyloop.sessions._streams import KIND_SNAPSHOT
from steadyloop.testing import CrashingJournal, SimulatedCrash
from steadyloop.testing._crash_matrix import summarize_session

STEPS = 30
Edit = Callable[[dict[str, Any]], None]


def summarising_agent(journal: Journal, session: str) -> Agent:
    """Calls ``send(n)`` STEPS times, summarising its session at 10 and 20, then answers.

    The answer quotes the summary in its prompt, so a summary read wrongly shows in it.
    """
    tools = ToolRegistry()

    @tools.tool(policy=ReplayPolicy.SAFE)
    async def send(n: int, context: ToolContext) -> dict[str, int]:
        if n % 10 == 0 and n < STEPS:
            await summarize_session(journal, APP, "u", session)
        return {"sent": n}

    def script(index: int, messages: Sequence[Message]) -> ModelReply | str:
        last = messages[-1] if messages else None
        if last is not None and last.role == "tool" and (last.content or "").startswith('{"sent"'):
            index = int(json.loads(last.content or "")["sent"])
        if index < STEPS:
            return ModelReply.call("send", {"n": index + 1}, id=f"c{index + 1}")
        summary = [m.content for m in messages if "Summary of" in (m.content or "")]
        return f"sent {STEPS}; {summary}"

    return Agent(
        name="summarising",
        model=ScriptedModel(script, record=False),
        tools=tools,
        budgets=Budgets(max_steps=STEPS + 5, max_actions=STEPS + 5, max_prompt_chars=10**9),
    )


class Raw:
    """The stored text of a store's records, read and rewritten behind the journal."""

    def __init__(
        self,
        rows: Callable[[str], list[tuple[int, str]]],
        put: Callable[[str, int, str], None],
    ) -> None:
        self.rows, self.put = rows, put


def sql_raw(run_sql: Callable[[str, tuple[Any, ...]], list[Any]]) -> Raw:
    def rows(stream: str) -> list[tuple[int, str]]:
        got = run_sql(
            "SELECT seq, data FROM {p}records WHERE namespace = ? AND stream = ? ORDER BY seq",
            (APP, stream),
        )
        return [(int(seq), data) for seq, data in got]

    def put(stream: str, seq: int, data: str) -> None:
        run_sql(
            "UPDATE {p}records SET data = ? WHERE namespace = ? AND stream = ? AND seq = ?",
            (data, APP, stream, seq),
        )

    return Raw(rows, put)


def jsonl_raw(path: Path) -> Raw:
    """A JSONL file's records: each is the canonical text nested in its batch line."""

    def lines() -> list[bytes]:
        return path.read_bytes().split(b"\n")

    def located(stream: str) -> dict[int, tuple[int, str]]:
        found: dict[int, tuple[int, str]] = {}
        for number, line in enumerate(lines()[1:], start=1):
            if not line:
                continue
            obj = json.loads(line)
            if obj.get("stream") == stream and "record" in obj:
                found[obj["seq"]] = (number, canonical_json(obj["record"]))
        return found

    def rows(stream: str) -> list[tuple[int, str]]:
        return [(seq, text) for seq, (_, text) in sorted(located(stream).items())]

    def put(stream: str, seq: int, data: str) -> None:
        number, text = located(stream)[seq]
        all_lines = lines()
        old = text.encode("utf-8")
        assert all_lines[number].count(old) == 1
        all_lines[number] = all_lines[number].replace(old, data.encode("utf-8"))
        path.write_bytes(b"\n".join(all_lines))

    return Raw(rows, put)


@asynccontextmanager
async def store(backend: str, tmp_path: Path) -> AsyncIterator[tuple[str, Raw]]:
    """A fresh journal URL, and its records' stored text behind the journal."""
    if backend == "sqlite":
        path = tmp_path / f"seal-{uuid.uuid4().hex[:8]}.db"

        def sqlite_sql(statement: str, params: tuple[Any, ...]) -> list[Any]:
            with sqlite3.connect(path) as conn:
                return conn.execute(statement.format(p="steadyloop_"), params).fetchall()

        yield f"sqlite:///{path}", sql_raw(sqlite_sql)
        return
    if backend == "jsonl":
        directory = tmp_path / f"seal-{uuid.uuid4().hex[:8]}"
        yield f"jsonl://{directory}", jsonl_raw(directory / namespace_filename(APP))
        return
    if backend == "redis":
        import redis

        from steadyloop.journal._redis import encode_name

        async with server_store("redis") as (url, prefix):
            client = redis.Redis.from_url(
                url.split("?", 1)[0], decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT
            )

            def key(stream: str) -> str:
                return f"{prefix}R:{encode_name(APP)}:{encode_name(stream)}"

            def rows(stream: str) -> list[tuple[int, str]]:
                return [(i + 1, d) for i, d in enumerate(client.lrange(key(stream), 0, -1))]

            def put(stream: str, seq: int, data: str) -> None:
                client.lset(key(stream), seq - 1, data)

            try:
                yield url, Raw(rows, put)
            finally:
                client.close()
        return
    import psycopg

    async with server_store("postgres") as (url, prefix):
        base = url.split("?", 1)[0]

        def postgres_sql(statement: str, params: tuple[Any, ...]) -> list[Any]:
            with psycopg.connect(base, autocommit=True, connect_timeout=CONNECT_TIMEOUT) as conn:
                cur = conn.execute(statement.format(p=prefix).replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []

        yield url, sql_raw(postgres_sql)


def edit_row(raw: Raw, stream: str, seq: int, change: Callable[[str], str]) -> None:
    """Rewrite the stored text of one record."""
    data = dict(raw.rows(stream))[seq]
    new = change(data)
    assert new != data
    raw.put(stream, seq, new)


def latest(raw: Raw, stream: str, kind: str) -> int:
    """The seq of the latest record of ``kind`` in ``stream``."""
    return max(seq for seq, data in raw.rows(stream) if json.loads(data)["kind"] == kind)


def payload_edit(edit: Edit) -> Callable[[str], str]:
    def change(text: str) -> str:
        rec = json.loads(text)
        edit(rec["payload"])
        return canonical_json(rec)

    return change


def flip_steps(p: dict[str, Any]) -> None:
    p["state"]["steps"] ^= 1 << 5  # one bit


def actions_plus_one(p: dict[str, Any]) -> None:
    p["state"]["actions"] += 1


def flip_summary(p: dict[str, Any]) -> None:
    text = p["summary"]["text"]
    p["summary"]["text"] = text.replace("a summary", "b summary", 1)


def flip_summary_bit(p: dict[str, Any]) -> None:
    text = p["summary"]["text"]
    p["summary"]["text"] = chr(ord(text[0]) ^ 0x20) + text[1:]  # one bit: a letter's case


def break_json(text: str) -> str:
    """Turn the ``:`` after a key inside the payload into ``;``: no longer JSON."""
    at = text.index('"payload":') + len('"payload":')
    colon = text.index(":", at + 2)
    return text[:colon] + ";" + text[colon + 1 :]


def edit_covered(text: str) -> str:
    """A change to the record a snapshot covers that the fold does not read."""
    rec = json.loads(text)
    rec["payload"]["edited"] = True
    return canonical_json(rec)


async def clean_result(url: str, agent: Callable[[Journal, str], Agent]) -> RunResult:
    async with await open_journal(url) as journal:
        return await run(agent(journal, "clean"), journal, APP, "u", "clean", "clean", "go")


async def crashed(url: str, agent: Callable[[Journal, str], Agent], at: int) -> None:
    async with await open_journal(url) as journal:
        with pytest.raises(SimulatedCrash):
            await run(agent(journal, "s"), CrashingJournal(journal, at), APP, "u", "s", "r", "go")


async def resumed(url: str, agent: Callable[[Journal, str], Agent]) -> RunResult:
    async with await open_journal(url) as journal:
        return await resume(agent(journal, "s"), journal, APP, "r")


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("steadyloop")
    ]


def same(result: RunResult, clean: RunResult) -> tuple[Any, ...]:
    """What must match an uninterrupted run (its own run id and output aside)."""
    output = (result.output or "").replace("-r-", "-clean-")
    return (result.stop_reason, output, result.steps, result.actions, result.parse_failures)


def expected(clean: RunResult) -> tuple[Any, ...]:
    return (clean.stop_reason, clean.output, clean.steps, clean.actions, clean.parse_failures)


RUN_DAMAGE: dict[str, Callable[[str], str]] = {
    "steps-bit-flip": payload_edit(flip_steps),
    "actions-plus-one": payload_edit(actions_plus_one),
    "broken-json": break_json,
}


@pytest.fixture
def every(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_module, "SNAPSHOT_EVERY", 10)


def normalise(text: str) -> str:
    """Event ids carry the session id; the clean run's session is another."""
    return re.sub(r"\bclean\b|\bs\b", "S", text)


@pytest.mark.parametrize("backend", ["sqlite", "jsonl", "postgres", "redis"])
@pytest.mark.parametrize("damage", [*RUN_DAMAGE, "covered-record-changed"])
async def test_a_damaged_run_snapshot_is_not_used(
    backend: str, damage: str, tmp_path: Path, every: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Resume past a damaged run.snapshot ends as the clean run does, with one warning."""
    await _resume_past_damage(
        backend,
        tmp_path,
        caplog,
        stream=run_stream("r"),
        kind=RUN_SNAPSHOT,
        damage=RUN_DAMAGE.get(damage),
    )


async def _resume_past_damage(
    backend: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    *,
    stream: str,
    kind: str,
    damage: Callable[[str], str] | None,
    check_clean: Callable[[Any], None] | None = None,
) -> None:
    """Crash, damage the latest snapshot (or, with no damage, what it covers), resume.

    The resumed run must end as the clean one did, with exactly one warning; on JSONL,
    whose batch check sees any changed line, a changed record that is no snapshot is
    refused as corruption instead.
    """
    async with store(backend, tmp_path) as (url, sql):
        clean = await clean_result(url, summarising_agent)
        if check_clean is not None:
            check_clean(clean)
        await crashed(url, summarising_agent, 50)
        seq = latest(sql, stream, kind)
        if damage is None:
            edit_row(sql, stream, seq - 1, edit_covered)
        else:
            edit_row(sql, stream, seq, damage)
        if damage is None and backend == "jsonl":
            # JSONL checks every batch: a changed record that is no snapshot is corruption.
            with pytest.raises(CorruptionError, match="does not match its check"):
                await resumed(url, summarising_agent)
            return
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = await resumed(url, summarising_agent)
        assert normalise(str(same(result, clean))) == normalise(str(expected(clean)))
        (warning,) = warnings(caplog)
        assert f"the snapshot at seq {seq} is damaged" in warning


SESSION_DAMAGE: dict[str, Callable[[str], str]] = {
    "summary-bit-flip": payload_edit(flip_summary_bit),
    "summary-text-flipped": payload_edit(flip_summary),
    "broken-json": break_json,
}


@pytest.mark.parametrize("backend", ["sqlite", "jsonl", "postgres", "redis"])
@pytest.mark.parametrize("damage", [*SESSION_DAMAGE, "covered-record-changed"])
async def test_a_damaged_session_snapshot_is_not_used(
    backend: str, damage: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Resume past a damaged session.snapshot ends as the clean run does, with one warning."""

    def summarised(clean: Any) -> None:
        assert "summary of the first" in (clean.output or "")

    await _resume_past_damage(
        backend,
        tmp_path,
        caplog,
        stream=session_stream("u", "s"),
        kind=KIND_SNAPSHOT,
        damage=SESSION_DAMAGE.get(damage),
        check_clean=summarised,
    )


def strip_seal(text: str) -> str:
    """The record as code from before seals wrote it: the same payload, no ``seal``."""
    rec = json.loads(text)
    del rec["payload"]["seal"]
    return canonical_json(rec)


@pytest.mark.parametrize("kind", [RUN_SNAPSHOT, KIND_SNAPSHOT])
async def test_a_snapshot_written_before_seals_is_folded_past_and_not_reported(
    kind: str, tmp_path: Path, every: None, caplog: pytest.LogCaptureFixture
) -> None:
    """An unsealed snapshot is not trusted: one warning, the clean result; doctor is quiet."""
    from steadyloop.cli._journal import diagnose

    async with store("sqlite", tmp_path) as (url, sql):
        clean = await clean_result(url, summarising_agent)
        await crashed(url, summarising_agent, 50)
        stream = run_stream("r") if kind == RUN_SNAPSHOT else session_stream("u", "s")
        for seq, data in sql.rows(stream):
            if json.loads(data)["kind"] == kind:
                edit_row(sql, stream, seq, strip_seal)
        async with await open_journal(url) as journal:
            findings = await diagnose(journal)
        assert [f for f in findings if f.severity == "error"] == []
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            result = await resumed(url, summarising_agent)
        assert normalise(str(same(result, clean))) == normalise(str(expected(clean)))
        (warning,) = warnings(caplog)
        assert "no seal" in warning
