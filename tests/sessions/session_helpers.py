"""Helpers shared by the session tests."""

from __future__ import annotations

from steadyloop.journal import Journal
from steadyloop.records import StoredRecord

APP = "app"
"""The app (journal namespace) the session tests use."""


async def all_records(journal: Journal, namespace: str = APP) -> list[StoredRecord]:
    """Every record of every stream of ``namespace``, stream by stream."""
    out: list[StoredRecord] = []
    for stream in await journal.streams(namespace):
        out.extend(await journal.read(namespace, stream))
    return out
