"""The append-only journal: one protocol, several backends, chosen by URL.

Examples:
    >>> import asyncio
    >>> from steadyloop.journal import StreamWrite, open_journal
    >>> from steadyloop.records import RecordFactory, SequentialIds, StepClock
    >>> async def demo():
    ...     make = RecordFactory(StepClock(), SequentialIds("r"))
    ...     async with await open_journal("memory://") as journal:
    ...         await journal.append("ns", [StreamWrite("s", [make("hello", {"n": 1})])])
    ...         return [r.seq for r in await journal.read("ns", "s")]
    >>> asyncio.run(demo())
    [1]
"""

from steadyloop.journal._copy import (
    CopyReport,
    compare_journals,
    copy_journal,
    journal_digests,
)
from steadyloop.journal._factory import (
    DEFAULT_URL,
    ENTRY_POINT_GROUP,
    SCHEMES,
    URL,
    open_journal,
    parse_url,
    redact_url,
)
from steadyloop.journal._files import FileLock, Files, fsync_directory
from steadyloop.journal._forwarding import ForwardingJournal
from steadyloop.journal._jsonl import JSONLJournal, namespace_filename
from steadyloop.journal._memory import MemoryJournal
from steadyloop.journal._protocol import (
    MAX_NAME_BYTES,
    AppendResult,
    Journal,
    PreparedBatch,
    StoredKey,
    StreamWrite,
    check_name,
)
from steadyloop.journal._sqlite import SQLiteJournal

__all__ = [
    "DEFAULT_URL",
    "ENTRY_POINT_GROUP",
    "MAX_NAME_BYTES",
    "SCHEMES",
    "URL",
    "AppendResult",
    "CopyReport",
    "FileLock",
    "Files",
    "ForwardingJournal",
    "JSONLJournal",
    "Journal",
    "MemoryJournal",
    "PreparedBatch",
    "SQLiteJournal",
    "StoredKey",
    "StreamWrite",
    "check_name",
    "compare_journals",
    "copy_journal",
    "fsync_directory",
    "journal_digests",
    "namespace_filename",
    "open_journal",
    "parse_url",
    "redact_url",
]
