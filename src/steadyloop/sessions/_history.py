"""What a partial session knows of the history it does not hold: ids, counts, positions.

A session read from its latest ``session.snapshot`` (see `steadyloop.sessions._fold`)
holds the events its latest summary does not cover, and the latest summary; the events
before them and the older summaries stay in the journal. The checks that look at the
whole history still need to see them:

* an event id may appear only once in a session, historical events included;
* a summary may not reuse an older summary's id, nor cover less than the latest one.

So the snapshot keeps the ids of the historical events and of the older summaries
([`History`][steadyloop.sessions._history.History]), and the checks use them. Event ids
are stored as runs of a common stem, a decimal number and a common tail, the number
going up by a fixed step (``run/1:reply``, ``run/3:reply``, ``run/5:reply`` … is one
run), because the ids a loop gives its events are numbered: a loop session's history
stays a few runs long however many events it holds. Ids without a number (random ids)
are kept one by one, so a snapshot of such a session grows with its history.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from steadyloop.records import JSONValue

__all__ = ["History", "IdSet", "Positions"]

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


@dataclass(frozen=True)
class History:
    """The part of a session a partial session does not hold.

    Attributes:
        count: How many historical events there are (they come before the session's
            ``events``).
        ids: The ids of those events.
        summaries: The ids of the committed summaries before the latest, oldest first.
    """

    count: int
    ids: IdSet
    summaries: tuple[str, ...]

    def to_json(self) -> dict[str, JSONValue]:
        """The history as JSON, for a snapshot."""
        return {"count": self.count, "ids": self.ids.to_json(), "summaries": list(self.summaries)}

    @classmethod
    def from_json(cls, data: object) -> History:
        """Rebuild a history from [`to_json`][steadyloop.sessions._history.History.to_json].

        Raises:
            ValueError: If the data is malformed or its count does not match its ids.
        """
        if not isinstance(data, Mapping) or set(data) != {"count", "ids", "summaries"}:
            raise ValueError("a history must be an object with 'count', 'ids' and 'summaries'")
        count, summaries = data["count"], data["summaries"]
        ids = IdSet.from_json(data["ids"])
        if type(count) is not int or count != len(ids):
            raise ValueError(f"the history counts {count!r} events but holds {len(ids)} ids")
        if not isinstance(summaries, list) or not all(isinstance(s, str) for s in summaries):
            raise ValueError("a history's 'summaries' must be a list of text")
        return cls(count, ids, tuple(summaries))


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
        return -1 if event_id in self._history.ids else None

    def __getitem__(self, event_id: str) -> int:
        got = self.get(event_id)
        if got is None:
            raise KeyError(event_id)
        return got

    def __contains__(self, event_id: str) -> bool:
        return self.get(event_id) is not None
