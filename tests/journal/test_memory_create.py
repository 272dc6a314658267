"""An inspecting open (``create=False``) of a memory URL finds only a store that exists."""

from __future__ import annotations

import uuid

import pytest

from steadyloop import StoreNotFound
from steadyloop.journal import MemoryJournal, StreamWrite, open_journal
from steadyloop.records import RecordFactory


async def test_a_private_memory_journal_is_never_found_by_an_inspecting_open() -> None:
    """``memory://`` with ``create=False`` raises StoreNotFound saying no journal is here."""
    with pytest.raises(StoreNotFound, match="no journal here"):
        await open_journal("memory://", create=False)


async def test_an_unknown_named_memory_journal_is_not_created_by_an_inspecting_open() -> None:
    """A name no journal of the process opened is refused, and stays unknown afterwards."""
    name = f"never-{uuid.uuid4().hex}"
    with pytest.raises(StoreNotFound, match="no journal here"):
        await open_journal(f"memory://{name}", create=False)
    with pytest.raises(StoreNotFound):
        await open_journal(f"memory://{name}", create=False)  # the refusal created nothing


async def test_a_named_memory_journal_opened_before_is_found_with_its_records() -> None:
    """Once opened with create=True, the named store is found by create=False, even closed."""
    name = f"kept-{uuid.uuid4().hex}"
    async with await open_journal(f"memory://{name}") as journal:
        await journal.append("app", [StreamWrite("s", [RecordFactory()("k", {"n": 1})])])
    async with await open_journal(f"memory://{name}", create=False) as again:
        assert [r.payload for r in await again.read("app", "s")] == [{"n": 1}]
    MemoryJournal.forget(name)
    with pytest.raises(StoreNotFound):
        await open_journal(f"memory://{name}", create=False)
