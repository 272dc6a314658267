"""What a partial session knows of the history it does not hold: ids, counts, positions.

A session read from its latest ``session.snapshot`` (see `steadyloop.sessions._fold`)
holds the events its latest summary does not cover, and the latest summary; the events
before them and the older summaries stay in the journal. The checks that look at the
whole history still need to see them:

* an event id may appear only once in a session, historical events included;
* a summary may not reuse an older summary's id, nor cover less than the latest one.

So the snapshot keeps what it can of the ids of the historical events and of the older
summaries ([`History`][steadyloop.sessions._history.History]), in bounded space: an
[`IdFilter`][steadyloop.sessions._history.IdFilter]. Numbered ids are stored as runs of a
common stem, a decimal number and a common tail, the number going up by a fixed step
(``run/1:reply``, ``run/3:reply``, ``run/5:reply`` … is one run), because the ids a loop
gives its events are numbered: a loop session's history stays a few runs long however many
events it holds. Up to [`KEEP`][steadyloop.sessions._history.KEEP] runs and other ids are
kept by name; every id beyond sets one bit of a fixed bitmap. So a snapshot's size follows
the state it holds, not the history: a session of 10,000 random ids keeps 64 of them and
256 bytes of bits.

The rule that refuses a duplicate is then: the writer refuses an id the session holds or
the filter names; an id whose bit is set may be historical, and the writer reads the
session whole from the journal before it writes (`SessionService.append_event`,
``summarize``), so the answer is exact. The fold from a snapshot refuses a named duplicate
and trusts that check for the others; the full fold (``journal doctor``, a whole read)
refuses every duplicate.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from steadyloop.records import JSONValue

__all__ = ["BITS", "KEEP", "History", "IdFilter", "IdSet", "Known", "Positions", "legacy_history"]

_NUMBERED = re.compile(r"^(.*?)(0|[1-9][0-9]{0,17})([^0-9]*)$", re.S)
"""An id as stem, number (no leading zero, so the text comes back the same) and tail."""


def _split(value: str) -> tuple[str, int, str] | None:
    m = _NUMBERED.match(value)
    if m is None or (m.group(1) and m.group(1)[-1].isdigit()):
        return None  # no number, or a number with a leading zero
    return m.group(1), int(m.group(2)), m.group(3)


@dataclass(frozen=True)
class IdSet:
    """An immutable set of ids, stored compactly as runs of numbered ids.

    Attributes:
        runs: ``(stem, tail)`` → runs ``[first, step, count]``: the ids ``stem + str(first
            + i * step) + tail`` for ``i`` below ``count``.
        plain: Ids that are not numbered, or that no run holds.
    """

    runs: Mapping[tuple[str, str], tuple[tuple[int, int, int], ...]] = field(default_factory=dict)
    plain: frozenset[str] = frozenset()

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        if value in self.plain:
            return True
        parts = _split(value)
        if parts is None:
            return False
        stem, n, tail = parts
        for first, step, count in self.runs.get((stem, tail), ()):
            offset = n - first
            if offset >= 0 and offset % step == 0 and offset // step < count:
                return True
        return False

    def __iter__(self) -> Iterator[str]:
        for (stem, tail), runs in self.runs.items():
            for first, step, count in runs:
                for i in range(count):
                    yield f"{stem}{first + i * step}{tail}"
        yield from self.plain

    def __len__(self) -> int:
        return len(self.plain) + sum(c for runs in self.runs.values() for _, _, c in runs)

    def union(self, ids: Iterable[str]) -> IdSet:
        """A new set holding these ids and ``ids`` (in order, each once)."""
        runs = {key: list(value) for key, value in self.runs.items()}
        plain = set(self.plain)
        for value in ids:
            parts = _split(value)
            if parts is None:
                plain.add(value)
                continue
            stem, n, tail = parts
            known = runs.setdefault((stem, tail), [])
            if known:
                first, step, count = known[-1]
                last = first + (count - 1) * step
                if count == 1 and n > first:
                    known[-1] = (first, n - first, 2)
                    continue
                if n == last + step:
                    known[-1] = (first, step, count + 1)
                    continue
            known.append((n, 1, 1))
        return IdSet({k: tuple(v) for k, v in runs.items()}, frozenset(plain))

    def to_json(self) -> dict[str, JSONValue]:
        """The set as JSON: ``{"runs": [[stem, tail, first, step, count], …], "ids": […]}``."""
        plain: list[JSONValue] = []
        plain.extend(sorted(self.plain))
        return {
            "runs": [
                [stem, tail, first, step, count]
                for (stem, tail), runs in sorted(self.runs.items())
                for first, step, count in runs
            ],
            "ids": plain,
        }

    @classmethod
    def from_json(cls, data: object) -> IdSet:
        """Rebuild a set from [`to_json`][steadyloop.sessions._history.IdSet.to_json] output.

        Raises:
            ValueError: If the data is malformed.
        """
        if not isinstance(data, Mapping) or set(data) != {"runs", "ids"}:
            raise ValueError("an id set must be an object with 'runs' and 'ids'")
        runs: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
        for run in data["runs"]:
            stem, tail, first, step, count = run
            if not (isinstance(stem, str) and isinstance(tail, str)):
                raise ValueError(f"a run's stem and tail must be text: {run!r}")
            if not all(type(x) is int for x in (first, step, count)) or min(step, count) < 1:
                raise ValueError(f"a run's numbers must be integers, step and count >= 1: {run!r}")
            runs.setdefault((stem, tail), []).append((first, step, count))
        ids = data["ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("an id set's 'ids' must be a list of text")
        return cls({k: tuple(v) for k, v in runs.items()}, frozenset(ids))


KEEP = 64
"""Ids (runs of numbered ids count as one) a snapshot keeps by name; the rest go to its bitmap."""

BITS = 2048
"""Bits of the bitmap of the ids a snapshot does not keep by name."""


def _bit(value: str) -> int:
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % BITS


@dataclass(frozen=True)
class IdFilter:
    """The ids of a session's history, in bounded space: some by name, the rest as bits.

    It keeps ids by name (runs of numbered ids, as an [`IdSet`][steadyloop.sessions._history.IdSet],
    and ids one by one) until it holds [`KEEP`][steadyloop.sessions._history.KEEP] entries;
    a run already kept still grows, so a loop's numbered ids stay named however many there
    are. Every other id sets one bit of a bitmap of [`BITS`][steadyloop.sessions._history.BITS]
    bits (its CRC-32). So an id is known to be in the history (named), known not to be (its
    bit is clear), or perhaps in it (its bit is set): the writer that needs an exact answer
    then reads the history from the journal (see `steadyloop.sessions._service`).

    Attributes:
        named: The ids kept by name.
        bits: The bitmap of the others (``0`` when there are none).
    """

    named: IdSet = field(default_factory=IdSet)
    bits: int = 0

    def __contains__(self, value: object) -> bool:
        """Whether the id is known to be in the history (kept by name)."""
        return value in self.named

    def may_hold(self, value: str) -> bool:
        """Whether the id is in the history or perhaps is (named, or its bit is set)."""
        return value in self.named or bool(self.bits >> _bit(value) & 1)

    def union(self, ids: Iterable[str]) -> IdFilter:
        """A new filter that also holds ``ids`` (in order)."""
        runs = {key: list(value) for key, value in self.named.runs.items()}
        plain = set(self.named.plain)
        entries = len(plain) + sum(len(v) for v in runs.values())
        bits = self.bits
        for value in ids:
            parts = _split(value)
            if parts is not None:
                stem, n, tail = parts
                known = runs.get((stem, tail))
                if known:
                    first, step, count = known[-1]
                    if count == 1 and n > first:
                        known[-1] = (first, n - first, 2)
                        continue
                    if n == first + count * step:
                        known[-1] = (first, step, count + 1)
                        continue
            if value in plain:
                continue
            if entries >= KEEP:
                bits |= 1 << _bit(value)
                continue
            entries += 1
            if parts is None:
                plain.add(value)
            else:
                runs.setdefault((parts[0], parts[2]), []).append((parts[1], 1, 1))
        return IdFilter(IdSet({k: tuple(v) for k, v in runs.items()}, frozenset(plain)), bits)

    def to_json(self) -> dict[str, JSONValue]:
        """The filter as JSON: the named ids as an id set, the bitmap in base64 (or ``""``)."""
        named = self.named.to_json()
        raw = self.bits.to_bytes(BITS // 8, "little") if self.bits else b""
        return {**named, "bits": base64.b64encode(raw).decode("ascii")}

    @classmethod
    def from_json(cls, data: object) -> IdFilter:
        """Rebuild a filter from [`to_json`][steadyloop.sessions._history.IdFilter.to_json].

        Raises:
            ValueError: If the data is malformed.
        """
        if not isinstance(data, Mapping) or set(data) != {"runs", "ids", "bits"}:
            raise ValueError("an id filter must be an object with 'runs', 'ids' and 'bits'")
        named = IdSet.from_json({"runs": data["runs"], "ids": data["ids"]})
        text = data["bits"]
        if not isinstance(text, str):
            raise ValueError("an id filter's 'bits' must be text")
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError:
            raise ValueError("an id filter's 'bits' must be base64") from None
        if raw and len(raw) != BITS // 8:
            raise ValueError(f"an id filter's bitmap must be {BITS // 8} bytes, not {len(raw)}")
        return cls(named, int.from_bytes(raw, "little"))


@dataclass(frozen=True)
class History:
    """The part of a session a partial session does not hold.

    Attributes:
        count: How many historical events there are (they come before the session's
            ``events``).
        ids: The ids of those events, in bounded space (an
            [`IdFilter`][steadyloop.sessions._history.IdFilter]).
        summaries: The ids of the committed summaries before the latest, likewise.
    """

    count: int
    ids: IdFilter
    summaries: IdFilter
    read: dict[str, frozenset[str]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    legacy: bool = field(default=False, compare=False)
    """Read from a snapshot written before id filters: its filters hold the right ids but
    not in the order of the events, so the next snapshot builds them from a whole read."""
    """Filled by the first whole read a writer made for it: ``"events"``, every historical
    event id (the history never changes, so the sessions that share this history need no
    second read)."""

    def to_json(self) -> dict[str, JSONValue]:
        """The history as JSON, for a snapshot."""
        return {
            "count": self.count,
            "events": self.ids.to_json(),
            "summaries": self.summaries.to_json(),
        }

    @classmethod
    def from_json(cls, data: object) -> History:
        """Rebuild a history from [`to_json`][steadyloop.sessions._history.History.to_json].

        A history written before id filters (every id listed: ``ids`` and a list of
        ``summaries``) is read too, into filters that hold the same ids.

        Raises:
            ValueError: If the data is malformed.
        """
        if isinstance(data, Mapping) and set(data) == {"count", "ids", "summaries"}:
            count, listed = data["count"], data["summaries"]
            every = IdSet.from_json(data["ids"])
            if type(count) is not int or count != len(every):
                raise ValueError(f"the history counts {count!r} events but holds {len(every)} ids")
            if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
                raise ValueError("a history's 'summaries' must be a list of text")
            return cls(count, IdFilter().union(every), IdFilter().union(listed), legacy=True)
        if not isinstance(data, Mapping) or set(data) != {"count", "events", "summaries"}:
            raise ValueError("a history must be an object with 'count', 'events' and 'summaries'")
        count = data["count"]
        if type(count) is not int or count < 1:
            raise ValueError(f"a history's count must be an integer >= 1, not {count!r}")
        return cls(count, IdFilter.from_json(data["events"]), IdFilter.from_json(data["summaries"]))


def legacy_history(count: int, events: Iterable[str], summaries: Iterable[str]) -> JSONValue:
    """A history as snapshots wrote it before id filters (every id listed), for ``doctor``."""
    return {
        "count": count,
        "ids": IdSet().union(events).to_json(),
        "summaries": list(summaries),
    }


class Known:
    """Ids held in full, and those a history's filter names: a ``Container`` for checks.

    Args:
        older: The history's filter.
        held: The ids held.
    """

    __slots__ = ("_held", "_older")

    def __init__(self, older: IdFilter, held: set[str]) -> None:
        self._older, self._held = older, held

    def __contains__(self, value: object) -> bool:
        return value in self._held or value in self._older


class Positions:
    """Where an event is in a session: what the summary chain check asks.

    Args:
        held: Each held event's id mapped to its index among all events.
        history: What is not held, if the session is partial.
        last_historical: The id of the last historical event (the latest summary's
            ``covers_through``), whose index a partial session still knows.

    An event of the history other than the last is given index -1: it comes before
    every event the chain check compares it with.
    """

    __slots__ = ("_held", "_history", "_last")

    def __init__(
        self,
        held: Mapping[str, int],
        history: History | None = None,
        last_historical: str | None = None,
    ) -> None:
        self._held = held
        self._history = history
        self._last = last_historical

    def get(self, event_id: str) -> int | None:
        """The event's index among all events, -1 for an older historical one, or None."""
        got = self._held.get(event_id)
        if got is not None or self._history is None:
            return got
        if event_id == self._last:
            return self._history.count - 1
        # Perhaps historical (its bit is set) counts as historical: a summary may only
        # cover through a held event, so either way it is refused.
        return -1 if self._history.ids.may_hold(event_id) else None

    def __getitem__(self, event_id: str) -> int:
        got = self.get(event_id)
        if got is None:
            raise KeyError(event_id)
        return got

    def __contains__(self, event_id: str) -> bool:
        return self.get(event_id) is not None
