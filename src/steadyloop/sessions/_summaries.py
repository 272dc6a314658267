"""Summary version chains, and the two records that make one summary.

A summary is written in two batches: ``summary.begin`` carries the whole summary, and
``summary.commit`` (a later batch) names the begin record it confirms. The fold shows a
summary only once its commit is read; a begin without a commit is a failed attempt and
is never visible, whatever follows it. Because the commit expects the sequence number
right after its begin, nothing can slip in between the two.

The chain rule is checked before writing and again by the fold, so a stored chain that
breaks it is reported as corruption instead of being shown:

- the first summary of a session has version 1 and replaces nothing;
- every later one has the latest version plus one and replaces the latest summary's id;
- its id is new, or the latest summary's own id (an update in place);
- it belongs to the session it is written into;
- it covers an event of the session, not before the one the latest summary covers.
"""

from __future__ import annotations

from collections.abc import Container

from steadyloop._errors import SessionError
from steadyloop.records import Record, RecordFactory
from steadyloop.sessions._history import Positions
from steadyloop.sessions._model import Summary
from steadyloop.sessions._streams import KIND_SUMMARY_BEGIN, KIND_SUMMARY_COMMIT

__all__ = ["begin_record", "check_next_summary", "commit_record"]


def check_next_summary(
    session_id: str,
    latest: Summary | None,
    used: Container[str],
    positions: Positions,
    candidate: Summary,
) -> int:
    """Check that ``candidate`` may follow ``latest`` in a session's chain.

    Args:
        session_id: The session the summary is written into.
        latest: The latest committed summary, if any.
        used: The ids of every committed summary.
        positions: Where each event of the session is (of a partial session, the
            history's events too, through its ids).
        candidate: The summary to check.

    Returns:
        How many events the candidate covers (the index of its last event plus one).

    Raises:
        SessionError: If the candidate breaks the chain rule; the message says how.
    """
    want_version = 1 if latest is None else latest.version + 1
    want_replaces = None if latest is None else latest.id
    name = f"summary {candidate.id!r}"
    if candidate.session_id != session_id:
        raise SessionError(
            f"{name} belongs to session {candidate.session_id!r}, not {session_id!r}"
        )
    if candidate.version != want_version:
        raise SessionError(
            f"{name} has version {candidate.version}; the next version in session "
            f"{session_id!r} is {want_version}"
        )
    if candidate.replaces != want_replaces:
        raise SessionError(
            f"{name} replaces {candidate.replaces!r}; version {want_version} of session "
            f"{session_id!r} must replace {want_replaces!r}"
        )
    if latest is not None and candidate.id != latest.id and candidate.id in used:
        raise SessionError(f"{name} reuses the id of an older summary of session {session_id!r}")
    index = positions.get(candidate.covers_through)
    if index is None:
        raise SessionError(
            f"{name} covers through event {candidate.covers_through!r}, which session "
            f"{session_id!r} does not have"
        )
    if latest is not None:
        before = positions[latest.covers_through]
        if index < before:
            raise SessionError(
                f"{name} covers through event {candidate.covers_through!r}, before event "
                f"{latest.covers_through!r} that summary {latest.id!r} already covers"
            )
    return index + 1


def begin_record(make: RecordFactory, summary: Summary) -> Record:
    """Make the ``summary.begin`` record of an attempt."""
    return make(KIND_SUMMARY_BEGIN, {"summary": summary.to_dict()})


def commit_record(make: RecordFactory, summary: Summary, begin: Record) -> Record:
    """Make the ``summary.commit`` record that confirms ``begin``."""
    return make(
        KIND_SUMMARY_COMMIT,
        {"summary_id": summary.id, "version": summary.version, "begin": begin.id},
    )
