"""Fixtures for session tests: a journal on every backend, and a deterministic service."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from session_helpers import APP

from steadyloop.journal import Journal, open_journal
from steadyloop.records import RecordFactory, SequentialIds, StepClock
from steadyloop.sessions import SessionService


@pytest.fixture
def make() -> RecordFactory:
    """A record factory with a step clock and sequential ids."""
    return RecordFactory(clock=StepClock(start=1_700_000_000_000_000), ids=SequentialIds("r"))


@pytest.fixture
async def journal(journal_url: str) -> AsyncIterator[Journal]:
    """A journal on the backend under test, closed afterwards."""
    async with await open_journal(journal_url) as j:
        yield j


@pytest.fixture
def service(journal: Journal, make: RecordFactory) -> SessionService:
    """A session service for the app ``"app"`` with deterministic ids and times."""
    return SessionService(journal, APP, records=make)
