"""Memory: one user's remembered text, and a search defined once for every backend.

Storing a session writes one ``memory.entry`` per event that has text (its text parts
joined by newlines), historical events included, into the user's memory stream. Entries
are keyed by ``(session id, event id)``: storing a session again adds only the events
not stored before. Deleting a session leaves its memory.

Search semantics, the same whatever backend holds the entries (the backend only stores
and returns records; all matching happens here):

1. **Normalise**: NFKC, then case folding, then NFKC again (so ``"Ｃａｆé"``,
   ``"CAFÉ"`` and ``"café"`` are one token).
2. **Tokenise**: a token is a maximal run of letters and digits (underscores and
   punctuation separate tokens). Han ideographs, hiragana and katakana are written
   without spaces, so each such character is a token on its own: ``"天气很好"`` gives
   ``天``, ``气``, ``很``, ``好``. Hangul words, which are spaced, stay whole.
3. **Score**: the number of *distinct* query tokens that occur among the entry's
   tokens. Entries scoring 0 are not hits.
4. **Order**: by score, highest first; ties by session id, then event id, by code
   point. That tie order is deterministic, but callers must not rely on it: the
   replay harness treats hits that tie in score as unordered.
5. **Limit**: at most ``limit`` hits.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from steadyloop._errors import CorruptionError, SessionError
from steadyloop._seal import skippable
from steadyloop.records import JSONValue, Record, RecordFactory, StoredRecord
from steadyloop.sessions._model import Session
from steadyloop.sessions._streams import KIND_MEMORY_ENTRY

__all__ = [
    "MemoryEntry",
    "MemoryHit",
    "memory_records",
    "normalize",
    "rank",
    "read_entries",
    "tokenize",
]

_WORD = re.compile(r"[^\W_]+")

# Scripts written without spaces between words: each character is a token.
_UNSPACED = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x3134F),  # CJK extensions B to G
)


def _unspaced(ch: str) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _UNSPACED)


def normalize(text: str) -> str:
    """Return ``text`` NFKC-normalised and case-folded (see the module doc)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def tokenize(text: str) -> list[str]:
    """Split text into search tokens, in order, repeats kept.

    Examples:
        >>> tokenize("Hello, WORLD_2 天气")
        ['hello', 'world', '2', '天', '气']
    """
    tokens: list[str] = []
    for match in _WORD.finditer(normalize(text)):
        start = 0
        word = match.group()
        for i, ch in enumerate(word):
            if _unspaced(ch):
                if start < i:
                    tokens.append(word[start:i])
                tokens.append(ch)
                start = i + 1
        if start < len(word):
            tokens.append(word[start:])
    return tokens


@dataclass(frozen=True)
class MemoryEntry:
    """One remembered event.

    Attributes:
        session_id: The session it came from.
        event_id: The event it came from.
        author: The event's author.
        text: The event's text.
        time: The event's time, in integer microseconds.
    """

    session_id: str
    event_id: str
    author: str
    text: str
    time: int

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the entry as a JSON object (the ``memory.entry`` payload)."""
        return asdict(self)


@dataclass(frozen=True)
class MemoryHit:
    """A search result.

    Attributes:
        session_id: The session the text came from.
        event_id: The event the text came from.
        author: The event's author.
        text: The remembered text, as stored.
        score: How many distinct query tokens it contains.
        time: The event's time, in integer microseconds.
    """

    session_id: str
    event_id: str
    author: str
    text: str
    score: int
    time: int

    def to_dict(self) -> dict[str, JSONValue]:
        """Return the hit as a JSON object."""
        return asdict(self)


def read_entries(records: Iterable[StoredRecord], where: str) -> list[MemoryEntry]:
    """Turn memory-stream records into entries, first one of each key winning.

    Raises:
        CorruptionError: If a record is not a well-formed ``memory.entry``.
    """
    entries: list[MemoryEntry] = []
    seen: set[tuple[str, str]] = set()
    for rec in records:
        p = rec.payload
        if rec.kind != KIND_MEMORY_ENTRY and skippable(rec.kind):
            continue  # a derived record of a later release (steadyloop._seal.skippable)
        try:
            if rec.kind != KIND_MEMORY_ENTRY:
                raise TypeError(f"unexpected record kind {rec.kind!r}")
            entry = MemoryEntry(
                session_id=_str(p["session_id"]),
                event_id=_str(p["event_id"]),
                author=_str(p["author"]),
                text=_str(p["text"]),
                time=_int(p["time"]),
            )
        except (KeyError, TypeError) as exc:
            raise CorruptionError(
                f"bad memory record: {exc}", location=f"{where}#{rec.seq}"
            ) from None
        key = (entry.session_id, entry.event_id)
        if key not in seen:
            seen.add(key)
            entries.append(entry)
    return entries


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def memory_records(
    make: RecordFactory, session: Session, stored: Iterable[MemoryEntry]
) -> list[Record]:
    """Make the ``memory.entry`` records for the events of ``session`` not yet stored."""
    have = {(e.session_id, e.event_id) for e in stored}
    out: list[Record] = []
    for event in session.all_events:
        text = event.text
        if not text.strip() or (session.id, event.id) in have:
            continue
        entry = MemoryEntry(session.id, event.id, event.author, text, event.time)
        out.append(make(KIND_MEMORY_ENTRY, entry.to_dict()))
    return out


def rank(entries: Sequence[MemoryEntry], query: str, limit: int) -> list[MemoryHit]:
    """Search ``entries`` for ``query`` with the semantics of the module doc.

    Raises:
        SessionError: If ``query`` is not a string or ``limit`` is not an integer >= 0.
    """
    if not isinstance(query, str):
        raise SessionError(f"a memory query must be a string, got {query!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise SessionError(f"limit must be an integer >= 0, got {limit!r}")
    wanted = set(tokenize(query))
    if not wanted or limit == 0:
        return []
    hits: list[MemoryHit] = []
    for e in entries:
        score = len(wanted.intersection(tokenize(e.text)))
        if score:
            hits.append(MemoryHit(e.session_id, e.event_id, e.author, e.text, score, e.time))
    hits.sort(key=lambda h: (-h.score, h.session_id, h.event_id))
    return hits[:limit]
