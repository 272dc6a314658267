r"""Every stream name and every id check, in one place, for sessions, runs and tasks.

A stream name is the canonical JSON array of a kind and its ids, for example
``["session", user_id, session_id]``, ``["run", run_id]``, ``["task", task_id]`` or
``["effect", *key]``.
JSON quoting keeps the parts apart (a quote, a comma or a colon inside an id cannot
forge another name), and JSON escapes every control character: the C0 controls as
canonical JSON does, and here also DEL and the C1 controls (``\x7f``–``\x9f``, such as
``\x85``), which journal names may not hold raw. The result still decodes to the
same array, so the mapping from ids to names is one to one: ids differing only by
case, trailing spaces, Unicode normal form or separators get different streams.

The id rules are one rule: an id is a non-empty string of valid Unicode (no lone
surrogates) whose stream name fits a journal name (`MAX_NAME_BYTES`). Only what
some layer cannot store at all is refused beyond that, and it is refused at the
front door, before anything is written:

* app names are journal namespaces, stored raw: no control characters;
* task ids are also columns of the task queue, and PostgreSQL text cannot hold NUL;
  they are at most `MAX_TASK_ID_BYTES` long.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from steadyloop._errors import InvalidBatch
from steadyloop.journal._protocol import MAX_NAME_BYTES, check_name
from steadyloop.records import canonical_json

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_TASK_ID_BYTES",
    "app_problem",
    "effect_stream",
    "id_problem",
    "run_stream",
    "stream_name",
    "task_id_problem",
    "task_stream",
]

MAX_TASK_ID_BYTES = 200
"""Longest task id (and dependency, idempotency key), in UTF-8 bytes."""

_CACHE: dict[tuple[str, ...], str] = {}
"""Stream names already made: a run names the same few streams on every append."""

_CACHE_MAX = 4096


def _escape_controls(text: str) -> str:
    # canonical JSON escapes C0 controls but leaves DEL and the C1 controls as they
    # are; journal names refuse every control character, so escape those too.
    if text.isascii() and "\x7f" not in text:
        return text
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x7f" or "\x80" <= ch <= "\x9f" else ch for ch in text
    )


def id_problem(value: object, what: str) -> str | None:
    """What is wrong with an id (user, session, run or task id), or ``None``.

    Args:
        value: The id.
        what: How messages name it, e.g. ``"session id"``.
    """
    if not isinstance(value, str) or not value:
        return f"{what} must be a non-empty string, got {value!r}"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{what} {value!r} is not valid Unicode"
    return None


def task_id_problem(value: object, what: str = "task id") -> str | None:
    """What is wrong with a task id (or a dependency or idempotency key), or ``None``."""
    problem = id_problem(value, what)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if "\x00" in value:
        return f"{what} {value!r} holds NUL, which the task queue cannot store"
    size = len(value.encode("utf-8"))
    if size > MAX_TASK_ID_BYTES:
        return f"{what} is {size} UTF-8 bytes long; the limit is {MAX_TASK_ID_BYTES}"
    return None


def app_problem(value: object, what: str = "app name") -> str | None:
    """What is wrong with an app name (a journal namespace), or ``None``."""
    problem = id_problem(value, what)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            return f"{what} {value!r} holds the control character {ch!r}"
    size = len(value.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"{what} is {size} UTF-8 bytes long; the limit is {MAX_NAME_BYTES}"
    return None


def stream_name(kind: str, *ids: str) -> str:
    """The stream name of ``kind`` and its ids: ``[kind, *ids]`` as escaped canonical JSON.

    Raises:
        ValueError: An id is not valid (see `id_problem`), or the name is longer
            than a journal name may be.
    """
    key = (kind, *ids)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    for value in ids:
        problem = id_problem(value, f"{kind} stream id")
        if problem is not None:
            raise ValueError(problem)
    name = _escape_controls(canonical_json([kind, *ids]))
    try:
        check_name(name, "stream name")
    except InvalidBatch as exc:
        raise ValueError(f"cannot name a {kind} stream for {list(ids)!r}: {exc}") from None
    if all(type(p) is str for p in ids):
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = name
    return name


def run_stream(run_id: str) -> str:
    """The stream of a run: ``["run", run_id]``."""
    return stream_name("run", run_id)


def task_stream(task_id: str) -> str:
    """The trail stream of a task: ``["task", task_id]``."""
    return stream_name("task", task_id)


def effect_stream(key: Sequence[str | int]) -> str:
    """The stream of a guarded effect: ``["effect", *key]``; a key holds texts and integers.

    Raises:
        ValueError: The key is empty, holds something else, or its name is longer
            than a journal name may be.
    """
    if not key or not all(type(part) in (str, int) for part in key):
        raise ValueError(f"an effect key is a non-empty list of texts and integers, got {key!r}")
    name = _escape_controls(canonical_json(["effect", *key]))
    try:
        check_name(name, "stream name")
    except InvalidBatch as exc:
        raise ValueError(f"cannot name an effect stream for {list(key)!r}: {exc}") from None
    return name
