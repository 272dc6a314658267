"""Helpers for the replay tests: Steadyloop's stores on a test journal, and flawed journals."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from steadyloop.journal import ForwardingJournal, Journal, StreamWrite, open_journal
from steadyloop.records import Record, StoredRecord
from steadyloop.replay import Backend, JournalStore

WriteFlaw = Callable[[str, Record], list[Record]]
ReadFlaw = Callable[[str, list[StoredRecord]], list[StoredRecord]]


def backend_at(url: str, name: str) -> JournalStore:
    """Steadyloop's store on the clean journal ``url`` names."""
    return JournalStore(Backend.from_url(url, name))


class Flawed(ForwardingJournal):
    """A journal that stores (or returns) something other than what it was given."""

    def __init__(self, inner: Journal, write: WriteFlaw | None, read: ReadFlaw | None) -> None:
        super().__init__(inner)
        self.write_flaw = write
        self.read_flaw = read

    def on_write(self, namespace: str, writes: list[StreamWrite]) -> list[StreamWrite]:
        if self.write_flaw is None:
            return writes
        out = []
        for w in writes:
            records = [r2 for r in w.records for r2 in self.write_flaw(w.stream, r)]
            out.append(StreamWrite(w.stream, records, w.expected_next))
        return out

    def on_read(
        self, namespace: str, stream: str, records: list[StoredRecord]
    ) -> list[StoredRecord]:
        return records if self.read_flaw is None else self.read_flaw(stream, records)


def flawed_at(
    url: str, name: str, *, write: WriteFlaw | None = None, read: ReadFlaw | None = None
) -> JournalStore:
    """Steadyloop's store on the journal ``url`` names, seen through a flaw."""

    async def opener() -> Journal:
        return Flawed(await open_journal(url), write, read)

    return JournalStore(Backend(name, opener))


def with_payload(record: Record, payload: dict[str, Any]) -> Record:
    """The same record with another payload."""
    return Record(kind=record.kind, payload=payload, id=record.id, time=record.time)


class Vanishing(ForwardingJournal):
    """A journal whose server goes away after ``writes`` appends (a real loss, not a case's)."""

    def __init__(self, inner: Journal, writes: int) -> None:
        super().__init__(inner)
        self.left = writes

    async def _append(self, batch: Any) -> Any:
        if self.left <= 0:
            from steadyloop._errors import BackendUnavailable

            raise BackendUnavailable("server went away")
        self.left -= 1
        return await super()._append(batch)


def vanishing_at(url: str, name: str, writes: int) -> JournalStore:
    """Steadyloop's store on ``url``, answering the probe, then failing every append past ``writes``."""

    async def opener() -> Journal:
        return Vanishing(await open_journal(url), writes)

    return JournalStore(Backend(name, opener))


def replay_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``steadyloop replay ARGS`` in a subprocess, with no server variables set."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("STEADYLOOP_")}
    full["COLUMNS"] = "200"
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "steadyloop", "replay", *args],
        capture_output=True,
        text=True,
        env=full,
        check=False,
        timeout=120,
    )
