"""Fixtures for audit tests: boards on SQLite (and PostgreSQL when a server is there)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from audit_helpers import APP, ManualClock

from backends import server_store
from steadyloop.audit import TaskBoard
from steadyloop.records import RecordFactory, SequentialIds, StepClock


@pytest.fixture
def clock() -> ManualClock:
    """A queue clock that moves only when the test says so."""
    return ManualClock()


@pytest.fixture(params=["sqlite", "postgres"])
async def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store URL for a queue (and journal): SQLite, or PostgreSQL under a prefix."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/audit.db"
    else:
        async with server_store("postgres") as (url, _prefix):
            yield url


@pytest.fixture
async def board(tmp_path: Path, clock: ManualClock) -> AsyncIterator[TaskBoard]:
    """A board on a SQLite file, with a manual queue clock and deterministic records."""
    records = RecordFactory(StepClock(), SequentialIds("rec"))
    async with await TaskBoard.open(
        f"sqlite:///{tmp_path}/audit.db", app=APP, clock=clock, records=records
    ) as b:
        yield b
