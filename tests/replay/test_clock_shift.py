"""The harness's step clock reads the present, and reports keep the bytes of a clock at its fixed start."""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from dict_store import DictStore

from steadyloop.replay import CLOCK_START, CLOCK_STEP, StoreEvent, parse_case, replay, run_case
from steadyloop.replay._harness import clock_shift

EVENTS = 12


def _case(events: int = EVENTS, tz: str | None = None) -> Any:
    header: dict[str, Any] = {"op": "case", "case_id": "clock", "description": "clock"}
    if tz is not None:
        header["tz"] = tz
    lines = [header, {"op": "create_session", "session": "s", "user": "ada", "session_id": "s"}]
    lines += [
        {"op": "append_event", "session": "s", "author": "user", "text": f"m{i}"}
        for i in range(events)
    ]
    return parse_case("".join(json.dumps(line) + "\n" for line in lines), "clock.jsonl")


class MillisecondStore(DictStore):
    """A store that keeps times to the millisecond (truncated), as some databases do."""

    async def append_event(self, ref: Any, event: StoreEvent, **kwargs: Any) -> None:
        cut = StoreEvent(
            id=event.id,
            author=event.author,
            parts=event.parts,
            state_delta=event.state_delta,
            time=event.time // 1000 * 1000,
            invocation_id=event.invocation_id,
        )
        await super().append_event(ref, cut, **kwargs)


async def test_the_step_clock_starts_at_the_present_second() -> None:
    """A run's first reading is the current second plus CLOCK_START's microseconds, and readings step by CLOCK_STEP."""
    before = int(time.time())
    run = await run_case(_case(), DictStore())
    after = int(time.time())
    readings = list(run.normaliser.times)
    assert before * 1_000_000 <= readings[0] - CLOCK_START % 1_000_000 <= after * 1_000_000
    assert readings[0] % 1_000_000 == CLOCK_START % 1_000_000
    assert {b - a for a, b in itertools.pairwise(readings)} == {CLOCK_STEP}


async def test_a_time_zone_case_keeps_the_fixed_clock() -> None:
    """A case with a `tz` runs on the clock at CLOCK_START, since an offset depends on the date."""
    assert clock_shift(_case(tz="America/New_York")) == 0
    run = await run_case(_case(tz="America/New_York"), DictStore())
    assert run.normaliser.times[0] == CLOCK_START


@pytest.mark.parametrize("now", [1_764_000_000.25, 1_790_000_123.75])
async def test_a_lossy_store_reports_the_same_bytes_on_any_day(
    now: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Times a store cut to the millisecond are reported exactly as under the fixed clock, whatever the day the run starts."""
    cases = [_case()]
    stores = [DictStore(), MillisecondStore("dict+ms")]
    fixed = (await replay(cases, stores)).to_dict()
    monkeypatch.setattr(time, "time", lambda: now)
    assert clock_shift(cases[0]) > 0
    shifted = (await replay(cases, [DictStore(), MillisecondStore("dict+ms")])).to_dict()
    monkeypatch.undo()

    def differences(report: dict[str, Any]) -> str:
        return json.dumps([c["differences"] for c in report["cases"]], sort_keys=True)

    assert differences(shifted) == differences(fixed)
    values = [d["backend_value"] for c in fixed["cases"] for d in c["differences"]]
    assert len(values) == EVENTS
    # Each reported time is a fixed-clock reading cut to the millisecond.
    assert values == [(CLOCK_START + i * CLOCK_STEP) // 1000 * 1000 for i in range(EVENTS)]


async def test_trpc_sql_appends_stay_off_the_stale_session_reload(tmp_path: Path) -> None:
    """trpc-agent-py's SqlSessionService never finds a harness session stale, so no append reloads the whole session."""
    pytest.importorskip("trpc_agent_sdk", reason="the trpc extra is not installed")
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("trpc_agent_sdk")
    handler = Collect(logging.WARNING)
    logger.addHandler(handler)
    try:
        report = await replay([_case(30)], ["trpc+memory", "trpc+sqlite"], workdir=tmp_path)
    finally:
        logger.removeHandler(handler)
    assert report.ok, report.to_dict()["cases"][0]["differences"]
    assert not [m for m in seen if "stale" in m], seen[:3]
