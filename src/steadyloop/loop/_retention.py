"""Keep a journal small and forget a user: prune finished runs, erase one user's data.

Both work through the journal protocol only
([`delete_stream`][steadyloop.journal.Journal.delete_stream], then
[`reclaim_space`][steadyloop.journal.Journal.reclaim_space]), so they work on every
backend, and both delete one stream at a time: each deletion is atomic, so a prune or
an erasure killed half-way has removed some streams whole and left the others whole,
and running it again finishes it.

An erasure also rewrites the app stream (``["app"]``) once, to clear the user's name from
the ``app:`` changes their sessions made (the changes stay: they belong to the app). A
journal has no update, so the rewrite goes through a copy: the cleared stream is first
written whole, in one batch, to ``["erasure", "app"]``; then the app stream is deleted and
written again from that copy in one batch, and the copy deleted. Killed at any point,
the next run finds the copy and finishes the swap, so nothing of the app's state is lost
or doubled. Run an erasure while no session writes ``app:`` state: a write that lands
between the deletion and the rewrite would be lost, and one that lands before the copy
is swapped in makes the erasure start the copy again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from steadyloop import _names
from steadyloop._errors import CorruptionError, SessionError
from steadyloop.journal import Journal, StreamWrite
from steadyloop.loop._run import load_run
from steadyloop.loop._state import parse_run_stream
from steadyloop.records import INTENT_KIND, RESULT_KIND, JSONValue, Record, StoredRecord
from steadyloop.sessions import (
    KIND_STATE_DELTA,
    app_stream,
    memory_stream,
    parse_session_stream,
    user_stream,
)
from steadyloop.sessions._fold import fold_scope_state, scope_snapshot_payload
from steadyloop.sessions._streams import KIND_STATE_SNAPSHOT

__all__ = ["RemovalReport", "Removed", "erase_user", "prune_runs"]

Progress = Callable[["Removed"], Awaitable[None] | None]
"""Called after each stream is deleted."""


@dataclass(frozen=True)
class Removed:
    """One stream that was (or, in a dry run, would be) deleted.

    Attributes:
        namespace: Its namespace (the app).
        stream: Its name.
        records: How many records it held.
        why: What it was: ``run <id>``, ``session <id>``, ``user state``, ``memory``.
        time: The time of its last record, in microseconds since the epoch.
    """

    namespace: str
    stream: str
    records: int
    why: str
    time: int

    def to_dict(self) -> dict[str, object]:
        """A JSON form."""
        return {
            "namespace": self.namespace,
            "stream": self.stream,
            "records": self.records,
            "why": self.why,
            "time": self.time,
        }


@dataclass
class RemovalReport:
    """What a prune or an erasure removed (or would remove) and what it kept on purpose.

    Attributes:
        removed: The deleted streams.
        kept: Old finished runs kept, each with the reason (``namespace/run: why``).
        dry_run: Whether nothing was deleted.
        reclaimed: What the backend did to give the space back (empty in a dry run).
        cleared: Of an erasure, the records kept but cleared of the user's name
            (``namespace/stream: what``).
    """

    removed: list[Removed] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    dry_run: bool = False
    reclaimed: str = ""
    cleared: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        """How many records the removed streams held."""
        return sum(r.records for r in self.removed)

    def to_dict(self) -> dict[str, object]:
        """A JSON form (the CLI's ``--json``)."""
        return {
            "dry_run": self.dry_run,
            "removed": [r.to_dict() for r in self.removed],
            "records": self.records,
            "kept": list(self.kept),
            "cleared": list(self.cleared),
            "reclaimed": self.reclaimed,
        }


def _open_intents(records: list[StoredRecord]) -> list[str]:
    open_: dict[str, None] = {}
    for r in records:
        intent_id = r.payload.get("intent_id")
        if not isinstance(intent_id, str):
            continue
        if r.kind == INTENT_KIND:
            open_[intent_id] = None
        elif r.kind == RESULT_KIND:
            open_.pop(intent_id, None)
    return list(open_)


async def _runs_named_by_tasks(journal: Journal) -> set[str]:
    """Run ids that an audit task's trail names (the trail needs them; they are kept)."""
    named: set[str] = set()
    for ns in await journal.namespaces():
        for stream in await journal.streams(ns):
            if not stream.startswith('["task",'):
                continue
            for r in await journal.read(ns, stream):
                run_id = r.payload.get("run_id")
                if isinstance(run_id, str):
                    named.add(run_id)
    return named


async def _notify(on_progress: Progress | None, removed: Removed) -> None:
    if on_progress is not None:
        waiting = on_progress(removed)
        if waiting is not None:
            await waiting


async def prune_runs(
    journal: Journal,
    before: int,
    *,
    dry_run: bool = False,
    namespace: str | None = None,
    on_progress: Progress | None = None,
) -> RemovalReport:
    """Delete the finished runs whose last record is older than ``before``.

    A run is removed only when it has ended (a ``run.ended`` record: not running,
    stopped, interrupted or waiting for a decision), holds no intent without a result,
    and no audit task's trail names it. Sessions are kept whole: their events hold
    what the run told the user, and no stored record of a session needs the run's
    stream. The effect ledger's streams (``["effect", …]``) are never pruned: a settled
    `NEVER` effect's record is what stops a runtime from running it again.

    Args:
        journal: The journal.
        before: The cutoff, in microseconds since the epoch.
        dry_run: Report what would be removed; delete nothing.
        namespace: Only this app; every namespace when ``None``.
        on_progress: Called after each deletion.

    Returns:
        What was (or would be) removed, and the old runs kept with the reason.
    """
    report = RemovalReport(dry_run=dry_run)
    named = await _runs_named_by_tasks(journal)
    names = [namespace] if namespace is not None else await journal.namespaces()
    for ns in names:
        for stream in await journal.streams(ns):
            run_id = parse_run_stream(stream)
            if run_id is None:
                continue
            records = await journal.read(ns, stream)
            if not records or records[-1].record.time >= before:
                continue
            where = f"{ns}/{run_id}"
            try:
                info = await load_run(journal, ns, run_id)
            except (CorruptionError, SessionError) as exc:
                report.kept.append(f"{where}: unreadable, left for doctor ({exc})")
                continue
            if info.state.ended is None:
                report.kept.append(f"{where}: not finished ({info.status})")
                continue
            if _open_intents(records):
                report.kept.append(f"{where}: holds an intent without a result")
                continue
            if run_id in named:
                report.kept.append(f"{where}: an audit task's trail names it")
                continue
            removed = Removed(ns, stream, len(records), f"run {run_id}", records[-1].record.time)
            report.removed.append(removed)
            if not dry_run:
                await journal.delete_stream(ns, stream)
                await _notify(on_progress, removed)
    if not dry_run:
        report.reclaimed = await journal.reclaim_space()
    return report


def _user_of_stream(stream: str) -> tuple[str, str] | None:
    """``(user id, what)`` for a stream that belongs to one user by its name."""
    session = parse_session_stream(stream)
    if session is not None:
        return session[0], f"session {session[1]}"
    try:
        value = json.loads(stream)
    except ValueError:
        return None
    if isinstance(value, list) and len(value) == 2 and isinstance(value[1], str):
        if value[0] == "user":
            return value[1], "user state"
        if value[0] == "memory":
            return value[1], "memory"
    return None


async def erase_user(
    journal: Journal,
    user_id: str,
    *,
    dry_run: bool = False,
    namespace: str | None = None,
    on_progress: Progress | None = None,
) -> RemovalReport:
    """Delete everything the journal keeps about one user.

    Removed: the user's sessions (events, summaries, snapshots), ``user:`` state,
    memory, and every run started for the user (its input, replies, and its effects'
    intents and results). A run of the user that a live driver holds is kept and
    reported: stop it, then erase again. Then the backend gives the space back
    ([`reclaim_space`][steadyloop.journal.Journal.reclaim_space]), so the bytes leave
    the SQLite file and the JSONL files too.

    Cleared, not removed: the ``app:`` state changes the user's sessions made. They
    belong to the app, so they stay, but the user, session and event they name are set
    to ``null`` (the app stream is rewritten through a copy; see the module docstring).

    Not removed: audit task trails that name one of the user's runs (reported), and
    idempotency keys (they hold digests and positions, not content).

    Args:
        journal: The journal.
        user_id: The user.
        dry_run: Report what would be removed; delete nothing.
        namespace: Only this app; every namespace when ``None``.
        on_progress: Called after each deletion.
    """
    # Validates the id the way the session layer does (a bad id is refused here).
    user_stream(user_id)
    memory_stream(user_id)
    report = RemovalReport(dry_run=dry_run)
    named = await _runs_named_by_tasks(journal)
    names = [namespace] if namespace is not None else await journal.namespaces()
    for ns in names:
        for stream in await journal.streams(ns):
            why: str | None = None
            owner = _user_of_stream(stream)
            if owner is not None and owner[0] == user_id:
                why = owner[1]
            run_id = parse_run_stream(stream)
            if run_id is not None:
                first = await journal.read(ns, stream, limit=1)
                if first and first[0].payload.get("user_id") == user_id:
                    try:
                        info = await load_run(journal, ns, run_id)
                        status = info.status
                    except (CorruptionError, SessionError):
                        status = "unreadable"
                    if status == "running":
                        report.kept.append(f"{ns}/{run_id}: a live driver holds it")
                        continue
                    if run_id in named:
                        report.kept.append(
                            f"{ns}/{run_id}: an audit task's trail names it (the run is erased)"
                        )
                    why = f"run {run_id}"
            if why is None:
                continue
            head = await journal.head(ns, stream)
            last = await journal.read(ns, stream, start=max(head, 1), limit=1)
            time = last[0].record.time if last else 0
            removed = Removed(ns, stream, head, why, time)
            report.removed.append(removed)
            if not dry_run:
                await journal.delete_stream(ns, stream)
                await _notify(on_progress, removed)
        await _clear_app_changes(journal, ns, user_id, report)
    if not dry_run:
        report.reclaimed = await journal.reclaim_space()
    return report


APP_COPY = _names.stream_name("erasure", "app")
"""Where an erasure writes the cleared app stream before it swaps it in."""

_SWAP_ATTEMPTS = 5
"""Copies an erasure makes of the app stream when writers keep moving it meanwhile."""


def _clear(rec: StoredRecord, user_id: str) -> dict[str, JSONValue] | None:
    """The payload of a ``state.delta`` of the user, cleared of their name; else ``None``."""
    p = rec.payload
    if rec.kind != KIND_STATE_DELTA or p.get("user_id") != user_id:
        return None
    return {**p, "user_id": None, "session_id": None, "event_id": None}


def _cleared_stream(ns: str, records: list[StoredRecord], user_id: str) -> list[Record]:
    """The app stream with the user's changes cleared and every state snapshot made anew.

    A snapshot's seal covers the record before it, so each is rebuilt from the fold of
    the cleared records (the state is the same: only the names changed).
    """
    out: list[Record] = []
    state: dict[str, JSONValue] = {}
    for rec in records:
        payload: dict[str, JSONValue] = dict(rec.payload)
        if rec.kind == KIND_STATE_SNAPSHOT and out:
            before = out[-1]
            payload = scope_snapshot_payload(
                rec.seq - 1, "app", state, (before.kind, before.payload)
            )
        else:
            payload = _clear(rec, user_id) or payload
            if rec.kind == KIND_STATE_DELTA:
                state.update(fold_scope_state(ns, [rec], "app"))
        out.append(Record(rec.kind, payload, rec.record.id, rec.record.time))
    return out


def _same(records: list[StoredRecord], copy: list[StoredRecord]) -> bool:
    return [(r.kind, r.payload) for r in records] == [(r.kind, r.payload) for r in copy]


async def _clear_app_changes(
    journal: Journal, ns: str, user_id: str, report: RemovalReport
) -> None:
    """Rewrite the app stream without the user's name, through a copy (resumable)."""
    app = app_stream()
    where = f"{ns}/{app}"
    for _ in range(_SWAP_ATTEMPTS):
        copy = await journal.read(ns, APP_COPY)
        records = await journal.read(ns, app)
        if not copy:
            mine = sum(_clear(r, user_id) is not None for r in records)
            if not mine:
                return
            report.cleared.append(f"{where}: {mine} app: change(s) of the user no longer name them")
            if report.dry_run:
                return
            cleared = _cleared_stream(ns, records, user_id)
            await journal.append(ns, StreamWrite(APP_COPY, cleared, expected_next=1))
            continue  # read both again: the swap below starts from what is stored
        if report.dry_run:
            report.cleared.append(f"{where}: an earlier erasure's rewrite is to be finished")
            return
        ids, copied = [r.record.id for r in records], [r.record.id for r in copy]
        if ids[: len(copied)] == copied and len(ids) > len(copied):
            # Written meanwhile: the copy is stale; make it again.
            await journal.delete_stream(ns, APP_COPY)
            continue
        if records and ids != copied:
            # Written between our deletion and our rewrite: keep the copy for a person.
            report.kept.append(
                f"{where}: written while an erasure swapped it; its earlier state is in "
                f"{APP_COPY}, to merge by hand"
            )
            return
        if records and not _same(records, copy):  # the old stream, not yet deleted
            await journal.delete_stream(ns, app)
            records = []
        if not records:
            await journal.append(ns, StreamWrite(app, [r.record for r in copy], expected_next=1))
        await journal.delete_stream(ns, APP_COPY)
        if not report.cleared:
            report.cleared.append(f"{where}: an earlier erasure's rewrite, finished")
        # Then once more: this user's own changes, if the finished rewrite was another's.
    report.kept.append(f"{where}: written during every attempt to clear it; erase again")
