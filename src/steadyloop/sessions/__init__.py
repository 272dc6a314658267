"""Sessions: events, scoped state, memory and summaries, as a fold over the journal.

A session is a journal stream of events; its state is a fold over that stream and over
its user's and its app's state streams. All of an app's streams live in the journal
namespace named after the app; see `steadyloop.sessions._streams` for the stream
names and every record kind.

Examples:
    >>> import asyncio
    >>> from steadyloop.journal import open_journal
    >>> from steadyloop.records import RecordFactory, SequentialIds, StepClock
    >>> from steadyloop.sessions import SessionService, TextPart
    >>> async def demo():
    ...     make = RecordFactory(StepClock(), SequentialIds("r"))
    ...     async with await open_journal("memory://") as journal:
    ...         service = SessionService(journal, "demo", records=make)
    ...         s = await service.create_session("ada", "s1")
    ...         s = await service.append_event(
    ...             s, service.new_event("user", [TextPart("Where is the café?")],
    ...                                  state_delta={"user:city": "Lyon", "temp:t": 1}))
    ...         await service.store_memory(s)
    ...         hits = await service.search_memory("ada", "CAFÉ")
    ...         again = await service.get_session("ada", "s1")
    ...         return s.state, again.state, [h.text for h in hits]
    >>> asyncio.run(demo())
    ({'user:city': 'Lyon', 'temp:t': 1}, {'user:city': 'Lyon'}, ['Where is the café?'])
"""

from steadyloop._errors import SessionError, SessionExists, SessionNotFound
from steadyloop.sessions._fold import fold_session
from steadyloop.sessions._memory import MemoryEntry, MemoryHit, normalize, tokenize
from steadyloop.sessions._model import (
    SCOPES,
    Event,
    Part,
    Scope,
    Session,
    SessionContext,
    Summary,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    key_scope,
    part_from_dict,
)
from steadyloop.sessions._service import SessionService
from steadyloop.sessions._streams import (
    KIND_CREATED,
    KIND_EVENT,
    KIND_MEMORY_ENTRY,
    KIND_SNAPSHOT,
    KIND_STATE_DELTA,
    KIND_SUMMARY_BEGIN,
    KIND_SUMMARY_COMMIT,
    RECORD_KINDS,
    app_stream,
    memory_stream,
    parse_session_stream,
    session_stream,
    user_stream,
)

__all__ = [
    "KIND_CREATED",
    "KIND_EVENT",
    "KIND_MEMORY_ENTRY",
    "KIND_SNAPSHOT",
    "KIND_STATE_DELTA",
    "KIND_SUMMARY_BEGIN",
    "KIND_SUMMARY_COMMIT",
    "RECORD_KINDS",
    "SCOPES",
    "Event",
    "MemoryEntry",
    "MemoryHit",
    "Part",
    "Scope",
    "Session",
    "SessionContext",
    "SessionError",
    "SessionExists",
    "SessionNotFound",
    "SessionService",
    "Summary",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "app_stream",
    "fold_session",
    "key_scope",
    "memory_stream",
    "normalize",
    "parse_session_stream",
    "part_from_dict",
    "session_stream",
    "tokenize",
    "user_stream",
]
