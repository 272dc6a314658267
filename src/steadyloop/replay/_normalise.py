"""Normalisation: hide representation, and nothing else.

Four rules, applied to a snapshot before it is compared:

1. **Text** (the ``text`` of parts, summaries, memory entries and hits, and a loop's
   ``output``) is NFKC-normalised, runs of whitespace become one space, and the ends
   are trimmed. Ids, state values, tool arguments and responses are data: never
   touched.
2. **Generated ids** — exactly the strings the run's id source handed out — become
   stable aliases ``<id:N>``, N counting from 1 in the order they were generated. Any
   other string stays as it is, so an id a backend changed (folded case, trimmed) no
   longer matches and shows up as a difference.
3. **Times** (``time`` fields outside data) that are exactly a reading of the run's
   clock become positional tokens ``<t:N>``, N being the reading's position. A missing
   or malformed time (not an integer, or not a reading — for example one that lost its
   microseconds), or a time earlier than the one before it in an ordered list (events,
   historical events, summaries), stays raw, so it differs. A raw integer time within
   a day of the run's readings is moved back by the clock's ``shift`` (the whole
   seconds the harness moved its step clock to the present), so it reads as if the
   clock had started at its fixed start; a time a case gave explicitly is elsewhere
   and stays as it is.
4. **Key order** does not matter: snapshots compare as JSON objects and are encoded
   with sorted keys.

The rules go by field name, and only fields of records have those names: the keys of a
snapshot's handle maps (session handles, users, query ids, checkpoint names, error
lines, runs, and the tool names under a run's ``effects``) are names the case chose. A
session whose handle is ``state`` or ``time`` is normalised like any other session.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from steadyloop.records import MAX_DEPTH

__all__ = ["JSONBool", "JSONFloat", "Normaliser", "normalise_text", "plain", "stack_room"]

_ROOM = 4 * MAX_DEPTH + 500
"""Python frames a walk over a snapshot may need: two per level of the deepest value a
case may hold (a function and its comprehension), with the snapshot's own levels and
the caller's frames on top."""


@contextlib.contextmanager
def stack_room() -> Iterator[None]:
    """Let a recursive walk reach the deepest value a case may hold, then restore.

    Values nest up to [`MAX_DEPTH`][steadyloop.records.MAX_DEPTH] levels; the walks over
    snapshots (normalise, diff, `plain`) recurse once or twice per level, which the
    default recursion limit of 1000 does not cover. Python 3.11 runs Python-to-Python
    calls without growing the C stack, so the raised limit is safe.
    """
    before = sys.getrecursionlimit()
    if before >= _ROOM:
        yield
        return
    sys.setrecursionlimit(_ROOM)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


_DATA_KEYS = frozenset({"state", "state_delta", "arguments", "response", "returns"})
_TEXT_KEYS = frozenset({"text", "output"})
_TIME_KEYS = frozenset({"time"})
_ORDERED_LISTS = frozenset({"events", "historical_events", "summaries"})

# The snapshot's domains (see ``_snapshot.py``): each maps the case's names to records.
_DOMAINS = frozenset(
    {
        "sessions",
        "memory",
        "queries",
        "lists",
        "checkpoints",
        "errors",
        "outcomes",
        "loops",
        "threads",
    }
)

# The Unicode White_Space characters. ``str.split()`` also splits on U+001C..U+001F
# (``str.isspace`` counts them; White_Space does not), so text holding one of those
# folds through this pattern instead.
_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_WHITE_SPACE_RUN = re.compile(f"[{_WHITE_SPACE}]+")


class JSONBool:
    """A JSON boolean that, unlike Python's ``bool``, never equals a number.

    Normalised documents hold these instead of ``True`` and ``False``, so that plain
    ``==`` on two documents is JSON equality. [`plain`][steadyloop.replay.plain] turns them back.

    Attributes:
        value: The boolean.
    """

    __slots__ = ("value",)

    def __init__(self, value: bool) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONBool) and other.value is self.value

    def __hash__(self) -> int:
        return hash(("JSONBool", self.value))

    def __repr__(self) -> str:
        return "true" if self.value else "false"


class JSONFloat(float):
    """A JSON number written with a fraction or exponent; never equals an integer.

    Two compare equal when their canonical text is the same (the shortest text that
    reads back as the same double), so `-0.0` and `0.0` differ, as they do on disk.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONFloat) and float.__repr__(self) == float.__repr__(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("JSONFloat", float.__repr__(self)))


_TRUE = JSONBool(True)
_FALSE = JSONBool(False)


def _scalar(value: Any) -> Any:
    """A boolean or a float as JSON sees it; any other scalar as it is."""
    if type(value) is bool:
        return _TRUE if value else _FALSE
    if type(value) is float:
        return JSONFloat(value)
    return value


def plain(value: Any) -> Any:
    """Return a normalised document as plain JSON values (booleans and floats unwrapped)."""
    with stack_room():
        return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, JSONBool):
        return value.value
    if isinstance(value, JSONFloat):
        return float(value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def normalise_text(text: str) -> str:
    r"""Return ``text`` NFKC-normalised with whitespace runs folded to one space, trimmed.

    Whitespace means the Unicode White_Space characters; control characters such as
    the information separators U+001C..U+001F are kept, so a backend that turns one
    into a space still differs.

    Examples:
        >>> normalise_text("  Ｃａｆé\n\tau  lait ")
        'Café au lait'
    """
    if not text.isascii():  # NFKC leaves ASCII as it is
        text = unicodedata.normalize("NFKC", text)
    if "\x1c" in text or "\x1d" in text or "\x1e" in text or "\x1f" in text:
        # Information separators are not whitespace: str.split() would fold them.
        return _WHITE_SPACE_RUN.sub(" ", text).strip(" ")
    # Without those, str.split() splits on exactly the White_Space characters, and trims.
    return " ".join(text.split())


@dataclass
class Normaliser:
    """Normalises the snapshots of one run.

    Args:
        ids: The ids the run's id source generated, in order.
        times: The readings of the run's clock, in order.
        shift: Microseconds the run's clock was moved forward by; a raw integer time
            within a day of the readings is reported that much earlier.

    Attributes:
        aliases: Generated id to alias.
        tokens: Clock reading to token.
    """

    ids: Sequence[str] = ()
    times: Sequence[int] = ()
    shift: int = 0
    aliases: dict[str, str] = field(init=False)
    tokens: dict[int, tuple[int, str]] = field(init=False)
    _near: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        # Built back to front, so that a value handed out twice keeps its first position.
        ids = list(enumerate(self.ids, start=1))
        self.aliases = {generated: f"<id:{i}>" for i, generated in reversed(ids)}
        times = list(enumerate(self.times, start=1))
        self.tokens = {reading: (i, f"<t:{i}>") for i, reading in reversed(times)}
        day = 86_400_000_000
        self._near = (
            (min(self.times) - day, max(self.times) + day) if self.shift and self.times else (1, 0)
        )

    def _unshift(self, value: int) -> int:
        """A raw time near the readings, moved back by the clock's shift."""
        low, high = self._near
        return value - self.shift if low <= value <= high else value

    def __call__(self, value: Any) -> Any:
        """Return a normalised copy of a snapshot (or of any part of one).

        An object whose keys are all snapshot domains (``sessions``, ``memory``,
        ``queries``, ``checkpoints``, ``errors``, ``loops``) is a snapshot, or a case's
        partial expectation: the keys of its handle maps are the case's names, and the
        rules apply from the records under them on.
        """
        # Building the copy allocates millions of containers and no cycles; the cyclic
        # collector would otherwise rescan them again and again (a third of the time).
        collecting = gc.isenabled()
        gc.disable()
        try:
            with stack_room():
                if isinstance(value, Mapping) and value.keys() <= _DOMAINS:
                    return self._snapshot(value)
                return self._doc(value, "")
        finally:
            if collecting:
                gc.enable()

    def _snapshot(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """Normalise a snapshot (or a checkpoint): each handle's record as a record."""
        out: dict[str, Any] = {}
        for domain, handles in value.items():
            if domain not in _DOMAINS or not isinstance(handles, Mapping):
                out[domain] = self._doc(handles, domain)
            elif domain == "checkpoints":  # each one holds sessions and memory again
                out[domain] = {
                    name: self._snapshot(body) if isinstance(body, Mapping) else self._doc(body, "")
                    for name, body in handles.items()
                }
            elif domain == "loops":
                out[domain] = {run: self._loop(body) for run, body in handles.items()}
            else:
                out[domain] = {handle: self._doc(body, "") for handle, body in handles.items()}
        return out

    def _loop(self, value: Any) -> Any:
        """A run's record; the keys of its ``effects`` are tool names, not fields."""
        out = self._doc(value, "")
        effects = value.get("effects") if isinstance(value, Mapping) else None
        if isinstance(effects, Mapping):
            out["effects"] = {name: self._doc(count, "") for name, count in effects.items()}
        return out

    # The two walks below visit every node of two snapshots, so they test exact types
    # first (snapshots are plain JSON) and handle scalars inline rather than recursing.

    def _doc(self, value: Any, key: str) -> Any:
        """Normalise outside data: ids aliased, text folded, times tokenised."""
        kind = type(value)
        if kind is str:
            alias = self.aliases.get(value)
            if alias is not None:
                return alias
            return normalise_text(value) if key in _TEXT_KEYS else value
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            return self._doc_dict(value)
        if kind is list or kind is tuple:
            return self._doc_list(value, key)
        if isinstance(value, str):  # a str subclass: as a plain str
            return self._doc(str(value), key)
        return _scalar(value)

    def _doc_dict(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """`_doc` of an object, called directly for the many objects of lists."""
        aliases, tokens = self.aliases, self.tokens
        out: dict[str, Any] = {}
        for k, v in value.items():
            vkind = type(v)
            if vkind is str:  # a time that is a string is data: only an alias applies
                alias = aliases.get(v)
                if alias is not None:
                    out[k] = alias
                else:
                    out[k] = normalise_text(v) if k in _TEXT_KEYS else v
            elif k in _TIME_KEYS:
                hit = tokens.get(v) if vkind is int else None
                out[k] = hit[1] if hit is not None else self._time(v)
            elif vkind is int or v is None:
                out[k] = v
            elif k in _DATA_KEYS:
                out[k] = self._data(v)
            elif vkind is list:
                out[k] = self._doc_list(v, k)
            else:
                out[k] = self._doc(v, k)
        return out

    def _doc_list(self, value: Sequence[Any], key: str) -> list[Any]:
        """`_doc` of an array; ordered lists get their times checked."""
        doc_dict = self._doc_dict
        items = [doc_dict(v) if type(v) is dict else self._doc(v, key) for v in value]
        if key in _ORDERED_LISTS:
            self._check_order(value, items)
        return items

    def _data(self, value: Any) -> Any:
        """Normalise inside data (state, arguments, responses): only ids are aliased."""
        kind = type(value)
        if kind is str:
            return self.aliases.get(value, value)
        if kind is int or value is None:
            return value
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            aliases = self.aliases
            out: dict[str, Any] = {}
            for k, v in value.items():
                vkind = type(v)
                if vkind is int or v is None:
                    out[k] = v
                elif vkind is str:
                    out[k] = aliases.get(v, v)
                elif vkind is bool:
                    out[k] = _TRUE if v else _FALSE
                else:
                    out[k] = self._data(v)
            return out
        if kind is list or kind is tuple:
            return [self._data(v) for v in value]
        if isinstance(value, str):  # a str subclass: as a plain str
            return self._data(str(value))
        return _scalar(value)

    def _time(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            hit = self.tokens.get(value)
            if hit is not None:
                return hit[1]
            return self._unshift(value)
        return self._data(value)

    def _check_order(self, raw: Sequence[Any], items: list[Any]) -> None:
        """Put a time back to its raw value where it is earlier than the one before."""
        last = 0
        tokens = self.tokens
        for i, item in enumerate(raw):
            if type(item) is not dict and not isinstance(item, Mapping):
                continue
            value: Any = item.get("time")
            kind = type(value)
            if kind is not int and (kind is bool or not isinstance(value, int)):
                continue
            hit = tokens.get(value)
            if hit is None:
                continue
            if hit[0] < last:
                items[i]["time"] = self._unshift(value)
            else:
                last = hit[0]
