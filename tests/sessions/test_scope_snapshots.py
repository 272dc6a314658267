"""State snapshots: a read of user: and app: state costs the changes since the latest one."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from session_helpers import APP

from steadyloop import Journal, StreamWrite
from steadyloop.cli._journal import diagnose
from steadyloop.journal import ForwardingJournal
from steadyloop.records import RecordFactory, StoredRecord
from steadyloop.sessions import SessionService, app_stream, user_stream
from steadyloop.sessions._fold import fold_scope_state, scope_snapshot_payload
from steadyloop.sessions._streams import KIND_STATE_SNAPSHOT, STATE_SNAPSHOT_EVERY

CHANGES = 2 * STATE_SNAPSHOT_EVERY + 37
"""State changes the other sessions write: past two multiples of the interval."""


class ScopeReads(ForwardingJournal):
    """Counts the records read from the app stream; can damage its latest snapshot."""

    def __init__(self, inner: Journal) -> None:
        super().__init__(inner)
        self.read_records = 0
        self.damage = False

    async def read(
        self, namespace: str, stream: str, start: int = 1, limit: int | None = None
    ) -> list[StoredRecord]:
        got = await super().read(namespace, stream, start=start, limit=limit)
        if stream != app_stream():
            return got
        self.read_records += len(got)
        if not self.damage:
            return got
        return [self._damaged(r) if r.kind == KIND_STATE_SNAPSHOT else r for r in got]

    @staticmethod
    def _damaged(rec: StoredRecord) -> StoredRecord:
        payload: dict[str, Any] = {**rec.payload, "state": dict(rec.payload["state"])}
        payload["state"]["app:first"] ^= 1 << 3  # one bit of a value no later change sets
        record = type(rec.record)(
            kind=rec.kind, payload=payload, id=rec.record.id, time=rec.record.time
        )
        return type(rec)(stream=rec.stream, seq=rec.seq, record=record)


async def _others_write_state(service: SessionService) -> None:
    """Other sessions of other users change app: and user: state CHANGES times in all."""
    sessions = [await service.create_session(f"other{k}", "s") for k in range(3)]
    for n in range(CHANGES):
        k = n % 3
        delta: dict[str, Any] = {"app:n": n, f"user:seen{k}": n}
        if n == 0:
            delta["app:first"] = 1
        event = service.new_event("tool", state_delta=delta)
        sessions[k] = await service.append_event(sessions[k], event)


async def test_a_read_of_app_state_starts_at_its_latest_snapshot(
    journal: Journal, make: RecordFactory
) -> None:
    """After many other sessions' changes, a read costs at most one interval of records."""
    service = SessionService(journal, APP, records=make)
    await service.create_session("ada", "mine", state={"user:lang": "en"})
    await _others_write_state(service)
    whole = await journal.read(APP, app_stream())
    snapshots = [r.seq for r in whole if r.kind == KIND_STATE_SNAPSHOT]
    assert len(snapshots) == 2, snapshots
    counting = ScopeReads(journal)
    session = await SessionService(counting, APP).get_session("ada", "mine", history=False)
    assert session.state == {
        "user:lang": "en",
        **fold_scope_state(APP, whole, "app"),
    }
    assert session.state["app:n"] == CHANGES - 1
    assert counting.read_records <= STATE_SNAPSHOT_EVERY + 2
    assert [f for f in await diagnose(journal) if f.severity == "error"] == []


async def test_a_damaged_state_snapshot_is_passed_over_with_one_warning(
    journal: Journal, make: RecordFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped bit in a state snapshot: the read folds the whole stream, one warning."""
    service = SessionService(journal, APP, records=make)
    await service.create_session("ada", "mine2")
    await _others_write_state(service)
    counting = ScopeReads(journal)
    counting.damage = True
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            session = await SessionService(counting, APP).get_session("ada", "mine2")
            assert session.state["app:first"] == 1
            assert session.state["app:n"] == CHANGES - 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "the state snapshot at seq" in warnings[0], warnings
    assert "digest" in warnings[0]


async def test_doctor_reports_a_state_snapshot_unlike_the_fold(
    journal: Journal, make: RecordFactory
) -> None:
    """A sealed state snapshot holding another state than the fold: snapshot-mismatch."""
    service = SessionService(journal, APP, records=make)
    await service.create_session("ada", "s", state={"user:a": 1})
    stream = user_stream("ada")
    (first,) = await journal.read(APP, stream)
    wrong = scope_snapshot_payload(1, "user", {"user:a": 2}, (first.kind, first.payload))
    await journal.append(APP, [StreamWrite(stream, [make(KIND_STATE_SNAPSHOT, wrong)])])
    findings = [f for f in await diagnose(journal) if f.severity == "error"]
    assert [f.what for f in findings] == ["snapshot-mismatch"]
    assert "state snapshot does not match" in findings[0].detail
