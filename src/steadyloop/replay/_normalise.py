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
   historical events, summaries), stays raw, so it differs.
4. **Key order** does not matter: snapshots compare as JSON objects and are encoded
   with sorted keys.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JSONBool", "JSONFloat", "Normaliser", "normalise_text", "plain"]

_SPACE = re.compile(r"\s+")
_DATA_KEYS = frozenset({"state", "state_delta", "arguments", "response", "returns"})
_TEXT_KEYS = frozenset({"text", "output"})
_TIME_KEYS = frozenset({"time"})
_ORDERED_LISTS = frozenset({"events", "historical_events", "summaries"})


class JSONBool:
    """A JSON boolean that, unlike Python's ``bool``, never equals a number.

    Normalised documents hold these instead of ``True`` and ``False``, so that plain
    ``==`` on two documents is JSON equality. :func:`plain` turns them back.

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
    """A JSON number written with a fraction or exponent; never equals an integer."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JSONFloat) and float(self) == float(other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("JSONFloat", float(self)))


_TRUE = JSONBool(True)
_FALSE = JSONBool(False)


def plain(value: Any) -> Any:
    """Return a normalised document as plain JSON values (booleans and floats unwrapped)."""
    if isinstance(value, JSONBool):
        return value.value
    if isinstance(value, JSONFloat):
        return float(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def normalise_text(text: str) -> str:
    r"""Return ``text`` NFKC-normalised with whitespace runs folded to one space, trimmed.

    Example:
        >>> normalise_text("  Ｃａｆé\n\tau  lait ")
        'Café au lait'
    """
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


@dataclass
class Normaliser:
    """Normalises the snapshots of one run.

    Args:
        ids: The ids the run's id source generated, in order.
        times: The readings of the run's clock, in order.

    Attributes:
        aliases: Generated id to alias.
        tokens: Clock reading to token.
    """

    ids: Sequence[str] = ()
    times: Sequence[int] = ()
    aliases: dict[str, str] = field(init=False)
    tokens: dict[int, tuple[int, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.aliases = {}
        for i, generated in enumerate(self.ids, start=1):
            self.aliases.setdefault(generated, f"<id:{i}>")
        self.tokens = {}
        for i, reading in enumerate(self.times, start=1):
            self.tokens.setdefault(reading, (i, f"<t:{i}>"))

    def __call__(self, value: Any) -> Any:
        """Return a normalised copy of a snapshot (or of any part of one)."""
        return self._value(value, False, "")

    def _value(self, value: Any, data: bool, key: str) -> Any:
        # Exact type checks first: snapshots are plain JSON, and this walk visits every
        # node of two snapshots, so the common cases must be cheap.
        kind = type(value)
        if kind is str:
            alias = self.aliases.get(value)
            if alias is not None:
                return alias
            if not data and key in _TEXT_KEYS:
                return normalise_text(value)
            return value
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            out: dict[str, Any] = {}
            scalar_keys = _TIME_KEYS
            for k, v in value.items():
                if not data and k in scalar_keys:
                    out[k] = self._time(v)
                    continue
                vkind = type(v)
                if vkind is int or v is None:
                    out[k] = v
                else:
                    out[k] = self._value(v, data or k in _DATA_KEYS, k)
            return out
        if kind is list or kind is tuple:
            items = [self._value(v, data, key) for v in value]
            if not data and key in _ORDERED_LISTS:
                self._check_order(value, items)
            return items
        if kind is bool:
            return _TRUE if value else _FALSE
        if kind is float:
            return JSONFloat(value)
        if isinstance(value, str):
            return self._value(str(value), data, key)
        return value

    def _time(self, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            hit = self.tokens.get(value)
            if hit is not None:
                return hit[1]
        return self._value(value, True, "")

    def _check_order(self, raw: Sequence[Any], items: list[Any]) -> None:
        """Put a time back to its raw value where it is earlier than the one before."""
        last = 0
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping):
                continue
            value = item.get("time")
            hit = (
                self.tokens.get(value)
                if isinstance(value, int) and not isinstance(value, bool)
                else None
            )
            if hit is None:
                continue
            if hit[0] < last:
                items[i]["time"] = value
            else:
                last = hit[0]
