"""The effect ledger: owners, raised effects, recorded values and keys (issue 18, items 4-6)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from steadyloop import EffectBusy
from steadyloop.effects import (
    Begun,
    EffectLedger,
    Happened,
    NotHappened,
    Owner,
    Recorded,
    ReplayPolicy,
    Unknown,
    describe,
)
from steadyloop.journal import open_journal
from steadyloop.records import RecordFactory, SequentialIds, StepClock

NEVER = ReplayPolicy.NEVER
KEY = ("t", "node", 1, "charge", 0)


def _hold_an_effect_open(url: str, ready: Any) -> None:
    """A second process: begin a NEVER effect, say so, then stay alive inside it."""

    async def main() -> None:
        journal = await open_journal(url)
        ledger = EffectLedger(journal)
        begun = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
        assert isinstance(begun, Begun)
        ready.set()
        await asyncio.sleep(600)

    asyncio.run(main())


@pytest.fixture
def live_owner(tmp_path: Path) -> Any:
    """A journal URL whose effect KEY is held open by a live second process."""
    url = f"sqlite:///{tmp_path / 'effects.db'}"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_hold_an_effect_open, args=(url, ready))
    child.start()
    assert ready.wait(120), "the child did not begin its effect"
    yield url, child
    if child.is_alive():
        os.kill(child.pid or 0, signal.SIGKILL)
    child.join(30)


async def test_an_effect_held_by_a_live_process_is_busy_not_unknown(live_owner: Any) -> None:
    """A second process finds a live owner's open intent busy, and no decision can be written meanwhile."""
    url, child = live_owner
    journal = await open_journal(url)
    ledger = EffectLedger(journal)
    with pytest.raises(EffectBusy, match=f"process {child.pid}"):
        await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    found = await ledger.find(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(found, Unknown)
    with pytest.raises(EffectBusy, match="still running"):
        await ledger.decide(found, NotHappened(note="guessing"))
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    found = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(found, Unknown) and found.reason == "no_result"
    assert isinstance(found.owner, dict) and found.owner["pid"] == child.pid
    await journal.close()


async def test_wait_outlasts_an_owner_that_dies(live_owner: Any) -> None:
    """With wait=, a call waits while the owner lives, then finds the effect unknown once it died."""
    url, child = live_owner
    journal = await open_journal(url)
    ledger = EffectLedger(journal)
    with pytest.raises(EffectBusy, match=r"waited 0\.2 s"):
        await ledger.begin(KEY, "charge", NEVER, {"cents": 500}, wait=0.2)
    loop = asyncio.get_running_loop()
    loop.call_later(0.5, os.kill, child.pid, signal.SIGKILL)
    found = await ledger.begin(KEY, "charge", NEVER, {"cents": 500}, wait=120)
    assert isinstance(found, Unknown) and found.reason == "no_result"
    await journal.close()


def test_an_owner_on_another_host_is_unknown_and_a_gone_process_is_dead() -> None:
    """Liveness is read off the process table: this process alive, a reaped child dead, another host unknown."""
    me = Owner.me("tok")
    assert me.liveness(live={"tok"}) == "alive"
    assert me.liveness(live=set()) == "dead"  # this process, but that owner is gone
    gone = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    gone.start()
    gone.join(60)
    dead = Owner(me.host, me.boot, gone.pid or 0, None, "x")
    assert dead.liveness() == "dead"
    assert Owner("elsewhere", None, 1, None, "y").liveness() == "unknown"


async def test_an_exception_declared_not_happened_lets_a_retry_run_anew() -> None:
    """An exception of a not_happened_on type records not_happened, so the retry begins a new intent."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    begun = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(begun, Begun)
    await ledger.fail(begun, ConnectionRefusedError("down"), (ConnectionRefusedError,))
    retry = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(retry, Begun) and retry.intent_id.endswith("#2")
    await ledger.finish(retry, "ch_1")
    again = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(again, Recorded) and again.value == "ch_1"
    await journal.close()


async def test_a_raised_effect_is_asked_about_and_the_decision_ends_it() -> None:
    """A NEVER effect that raised otherwise is unknown (reason raised) until decided; after that it is settled."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    begun = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(begun, Begun)
    await ledger.fail(begun, TimeoutError("read timed out"))
    found = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(found, Unknown)
    assert (found.reason, found.error) == ("raised", "TimeoutError: read timed out")
    assert found.to_json()["error"] == "TimeoutError: read timed out"
    decided = await ledger.decide(found, Happened(value="ch_9", note="provider shows ch_9"))
    assert isinstance(decided, Recorded) and decided.value == "ch_9"
    after = await ledger.begin(KEY, "charge", NEVER, {"cents": 500})
    assert isinstance(after, Recorded) and after.value == "ch_9"
    await journal.close()


async def test_tuples_come_back_as_tuples() -> None:
    """A recorded value keeps its tuples, and an object that looks like a tag stays an object."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    value = {"pair": ("a", 1), "nested": [(1, (2, 3))], "tricky": {"$tuple": [1]}}
    begun = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(begun, Begun)
    await ledger.finish(begun, value)
    found = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(found, Recorded)
    assert found.value == value
    assert isinstance(found.value["pair"], tuple) and isinstance(found.value["nested"][0][1], tuple)
    await journal.close()


async def test_an_unencodable_value_is_recorded_as_happened(caplog: Any) -> None:
    """An effect whose value has no JSON form is settled as happened (one warning), never left open."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    begun = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(begun, Begun)
    await ledger.finish(begun, {"receipt": object()})
    assert [r.levelname for r in caplog.records if r.name == "steadyloop.effects"] == ["WARNING"]
    found = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(found, Recorded) and found.error is not None
    assert "no JSON form" in found.error
    await journal.close()


async def test_an_exception_whose_str_raises_is_still_recorded() -> None:
    """An effect raising an exception whose __str__ raises gets a result; its intent does not stay open."""

    class Rude(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(Rude()) == "Rude: <str() of this exception raised RuntimeError>"
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    begun = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(begun, Begun)
    await ledger.fail(begun, Rude())
    found = await ledger.begin(KEY, "charge", NEVER, {})
    assert isinstance(found, Unknown) and found.reason == "raised"
    await journal.close()


@pytest.mark.parametrize("part", ["\x85", "\x7f", "\u2028", "a\x00b"])
async def test_keys_with_control_characters_name_a_stream(part: str, tmp_path: Path) -> None:
    """An effect key holding control characters still names one stream, through the naming module."""
    journal = await open_journal(f"sqlite:///{tmp_path / 'k.db'}")
    ledger = EffectLedger(journal)
    key = ("t", part, 1)
    begun = await ledger.begin(key, "charge", NEVER, {})
    assert isinstance(begun, Begun)
    await ledger.finish(begun, "ok")
    found = await ledger.begin(key, "charge", NEVER, {})
    assert isinstance(found, Recorded) and found.value == "ok"
    other = await ledger.begin(("t", part + "x", 1), "charge", NEVER, {})
    assert isinstance(other, Begun)
    ledger.abandon(other)
    await journal.close()


async def test_another_tool_under_the_same_key_is_unknown() -> None:
    """An intent whose key matches but whose tool differs is asked about, never matched."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    begun = await ledger.begin(KEY, "charge", NEVER, {"cents": 5})
    assert isinstance(begun, Begun)
    await ledger.finish(begun, "ch_1")
    found = await ledger.begin(KEY, "refund", NEVER, {"cents": 5})
    assert isinstance(found, Unknown) and found.reason == "arguments_changed"
    await journal.close()


async def test_effect_records_are_pinned_byte_for_byte() -> None:
    """An effect's intent (with its owner) and its tagged result are exactly these bytes."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal, records=RecordFactory(StepClock(1000, 1), SequentialIds("r")))
    begun = await ledger.begin(("t", "\x85", 1), "charge", NEVER, {"cents": 5})
    assert isinstance(begun, Begun)
    await ledger.finish(begun, ("ch_1", {"$tuple": 0}))
    stored = await journal.read("effects", begun.stream)
    assert begun.stream == '["effect","t","\\u0085",1]'
    intent, result = (s.record for s in stored)
    owner = intent.payload["owner"]
    assert isinstance(owner, dict) and sorted(owner) == [
        "boot",
        "host",
        "pid",
        "pid_start",
        "token",
    ]
    assert owner["pid"] == os.getpid() and owner["token"] == begun.token
    assert sorted(intent.payload) == [
        "arguments", "attempt", "intent_id", "key", "owner", "policy", "tool", "what",
    ]  # fmt: skip
    assert intent.payload["intent_id"] == '["effect","t","\\u0085",1]#1'
    assert result.to_json() == (
        '{"id":"r-000002","kind":"effect.result","payload":{"intent_id":'
        '"[\\"effect\\",\\"t\\",\\"\\\\u0085\\",1]#1","status":"ok","value":'
        '{"$tuple":["ch_1",{"$object":{"$tuple":0}}]}},"time":1001}'
    )
    await journal.close()


TASK = ("t", "node", "[]", 3, '["__pregel_pull","node"]', "charge")


async def test_a_task_stream_asks_about_an_intent_an_earlier_execution_left_unclaimed() -> None:
    """A call with new arguments is unknown, naming the earlier execution's unclaimed intent; claimed ones and its own execution's are not candidates."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    first = await ledger.begin(TASK, "charge", NEVER, {"cents": 100}, call="a", execution="e1")
    assert isinstance(first, Begun) and first.shared
    ledger.abandon(first)  # died between intent and charge
    same_execution = await ledger.find(
        TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e1"
    )
    assert same_execution is None  # a sibling of its own execution: a new effect
    claimed = await ledger.find(
        TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e2", claimed={"a"}
    )
    assert claimed is None  # call "a" of this execution took it
    found = await ledger.begin(TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e2")
    assert isinstance(found, Unknown)
    assert (found.reason, found.intent_id, found.claims) == (
        "arguments_changed",
        first.intent_id,
        first.intent_id,
    )
    assert found.recorded_arguments == {"cents": 100} and found.arguments == {"cents": 101}
    safe = await ledger.begin(
        TASK, "charge", ReplayPolicy.SAFE, {"cents": 101}, call="c", execution="e2"
    )
    assert isinstance(safe, Begun)  # a SAFE call is never asked
    ledger.abandon(safe)
    without_execution = await ledger.find(TASK, "charge", NEVER, {"cents": 101}, call="b")
    assert without_execution is None  # not one at a time: a new effect
    await journal.close()


async def test_a_decision_about_a_changed_call_applies_by_its_identity() -> None:
    """Once decided, the changed call replays by its own identity, and a later change asks about the intent that acted."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    first = await ledger.begin(TASK, "charge", NEVER, {"cents": 100}, call="a", execution="e1")
    assert isinstance(first, Begun)
    await ledger.finish(first, "ch_1")  # charged, then the checkpoint was lost
    found = await ledger.begin(TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e2")
    assert isinstance(found, Unknown) and found.intent_id == first.intent_id
    decided = await ledger.decide(found, Happened(value="ch_1", note="seen at the bank"))
    assert isinstance(decided, Recorded) and decided.value == "ch_1"
    again = await ledger.begin(TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e3")
    assert isinstance(again, Recorded) and again.value == "ch_1"
    counted = await ledger.begin(
        TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e3", decided_first=True
    )
    assert counted == 1
    later = await ledger.begin(TASK, "charge", NEVER, {"cents": 102}, call="c", execution="e4")
    assert isinstance(later, Unknown) and later.intent_id == first.intent_id
    assert later.claims == decided.intent_id
    back = await ledger.begin(TASK, "charge", NEVER, {"cents": 100}, call="a", execution="e4")
    assert isinstance(back, Unknown) and back.intent_id == first.intent_id  # taken over
    await journal.close()


async def test_a_changed_call_decided_not_to_have_happened_runs_and_takes_the_intent() -> None:
    """Decided "not happened", the changed call runs under an intent of its own that takes the earlier one over: no later execution asks about it."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)
    first = await ledger.begin(TASK, "charge", NEVER, {"cents": 100}, call="a", execution="e1")
    assert isinstance(first, Begun)
    ledger.abandon(first)
    found = await ledger.begin(TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e2")
    assert isinstance(found, Unknown)
    assert await ledger.decide(found, NotHappened("not at the bank")) is None
    run = await ledger.begin(
        TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e2", again=True,
        claims=found.claims,
    )  # fmt: skip
    assert isinstance(run, Begun)
    await ledger.finish(run, "ch_2")
    replay = await ledger.begin(TASK, "charge", NEVER, {"cents": 101}, call="b", execution="e3")
    assert isinstance(replay, Recorded) and replay.value == "ch_2"
    changed = await ledger.begin(TASK, "charge", NEVER, {"cents": 7}, call="z", execution="e4")
    assert isinstance(changed, Unknown) and changed.intent_id == run.intent_id
    await journal.close()


async def test_sibling_calls_of_one_task_share_its_stream_without_conflicts() -> None:
    """Calls at once of one task each get their intent and result into the one stream, none busy."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal)

    async def one(call: str) -> None:
        begun = await ledger.begin(TASK, "charge", NEVER, {"c": call}, call=call, execution="e1")
        assert isinstance(begun, Begun)
        await asyncio.sleep(0)
        await ledger.finish(begun, call)

    await asyncio.gather(*(one(str(i)) for i in range(5)))
    for i in range(5):
        done = await ledger.begin(TASK, "charge", NEVER, {"c": str(i)}, call=str(i))
        assert isinstance(done, Recorded) and done.value == str(i)
    await journal.close()


async def test_task_stream_records_are_pinned_byte_for_byte() -> None:
    """A task stream's intent carries its call and execution, and a take-over its claim, exactly so."""
    journal = await open_journal("memory://")
    ledger = EffectLedger(journal, records=RecordFactory(StepClock(1000, 1), SequentialIds("r")))
    first = await ledger.begin(("t", "n"), "charge", NEVER, {"cents": 5}, call="a", execution="e1")
    assert isinstance(first, Begun)
    ledger.abandon(first)
    found = await ledger.begin(("t", "n"), "charge", NEVER, {"cents": 6}, call="b", execution="e2")
    assert isinstance(found, Unknown)
    await ledger.decide(found, Happened(value="ch", note="n"))
    stored = [s.record for s in await journal.read("effects", first.stream)]
    intent = stored[0].payload
    assert sorted(intent) == [
        "arguments", "attempt", "call", "execution", "intent_id", "key", "owner", "policy",
        "tool", "what",
    ]  # fmt: skip
    assert (intent["intent_id"], intent["call"], intent["execution"]) == (
        '["effect","t","n"]#1',
        "a",
        "e1",
    )
    assert stored[1].to_json() == (
        '{"id":"r-000002","kind":"effect.intent","payload":{"arguments":{"cents":6},'
        '"attempt":1,"call":"b","claims":"[\\"effect\\",\\"t\\",\\"n\\"]#1","execution":"e2",'
        '"intent_id":"[\\"effect\\",\\"t\\",\\"n\\"]#2","key":["t","n"],"policy":"never",'
        '"tool":"charge","what":"tool"},"time":1001}'
    )
    await journal.close()
