"""Real crashes: a child process running a many-step run is killed with SIGKILL, often."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loop_helpers import APP

from steadyloop._errors import RunNotFound
from steadyloop.journal import open_journal
from steadyloop.loop import Happened, NotHappened, StopReason, load_run, resolve, run_stream
from steadyloop.sessions import SessionService, session_stream
from steadyloop.sessions._streams import KIND_SNAPSHOT

CHILD = Path(__file__).with_name("sigkill_child.py")
STEPS = 150
KILLS = 50


def sink_lines(sink: Path) -> list[tuple[str, int]]:
    if not sink.exists():
        return []
    return [(i, int(n)) for i, n in (line.split() for line in sink.read_text().splitlines())]


async def observe(url: str, sink: Path) -> tuple[int, bool, str | None]:
    """(durable steps, ended?, open intent resolved) — resolving from the sink's truth."""
    async with await open_journal(url) as journal:
        try:
            info = await load_run(journal, APP, "soak")
        except RunNotFound:
            return 0, False, None
        state = info.state
        resolved = None
        if state.suspended is not None:
            done = {i: n for i, n in sink_lines(sink)}
            intent = state.suspended
            decision: Happened | NotHappened
            if intent in done:
                decision = Happened({"sent": done[intent]}, note="found in the sink")
            else:
                decision = NotHappened("not in the sink")
            await resolve(journal, APP, "soak", intent, decision)
            resolved = intent
        return state.steps, state.ended is not None, resolved


@pytest.mark.slow
@pytest.mark.chaos(smoke=["sqlite"])
async def test_sigkill_at_random_moments_loses_nothing_and_repeats_nothing(
    backend: str, journal_url: str, tmp_path: Path
) -> None:
    """After 50 SIGKILLs and resumes: no durable step lost, no e-mail twice, a terminal end."""
    if backend == "memory":
        pytest.skip("the memory backend does not outlive a process")
    rng = random.Random(f"sigkill-{backend}")
    sink = tmp_path / "sink.log"
    kills = resolutions = 0
    progress = 0
    final: dict[str, object] | None = None
    started = time.monotonic()
    while final is None:
        child = subprocess.Popen(
            [sys.executable, str(CHILD), journal_url, "soak", str(sink), str(STEPS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready", (
            child.stderr.read() if child.stderr else ""
        )
        if kills < KILLS:
            time.sleep(rng.uniform(0.0, 0.03))
            child.kill()
            kills += child.wait() == -9
        out, err = child.communicate()
        if child.returncode not in (0, -9):
            pytest.fail(f"child failed ({child.returncode}):\n{err}")
        steps, _ended, resolved = await observe(journal_url, sink)
        assert steps >= progress, f"durable steps went back from {progress} to {steps}"
        progress = steps
        resolutions += resolved is not None
        if child.returncode == 0:
            result = json.loads(out.strip().splitlines()[-1])
            if result["stop_reason"] != StopReason.RESUME_STATE_UNKNOWN.value:
                final = result
        assert time.monotonic() - started < 240, "the soak made no progress to its end"
    assert final["stop_reason"] == "completed"
    assert kills >= KILLS
    lines = sink_lines(sink)
    sent = [n for _, n in lines]
    assert sorted(sent) == list(range(1, STEPS + 1)), "an e-mail was sent twice or never"
    async with await open_journal(journal_url) as journal:
        info = await load_run(journal, APP, "soak")
        assert info.state.ended is not None
        assert (info.state.steps, info.state.actions) == (STEPS + 1, STEPS)
        session = await SessionService(journal, APP).get_session("user", "session-soak")
        every = session.all_events
        observed = [p.response for e in every if e.author == "tool" for p in e.parts]
        assert observed == [{"sent": n} for n in range(1, STEPS + 1)]
        assert len(session.summaries) >= STEPS // 5  # the child summarises every 5 steps
        kinds = [r.kind for r in await journal.read(APP, session_stream("user", "session-soak"))]
        assert kinds.count(KIND_SNAPSHOT) == len(session.summaries)
        records = await journal.read(APP, run_stream("soak"))
        claims = sum(r.kind == "run.claimed" for r in records)
    assert claims > 1  # the run really was resumed
    print(
        f"{backend}: {kills} kills, {claims} drivers, {resolutions} resolutions, "
        f"{time.monotonic() - started:.1f}s"
    )
