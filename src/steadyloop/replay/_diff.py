"""The diff engine: structural differences between two JSON documents, by JSON Pointer.

Two modes:

* [`diff`][steadyloop.replay.diff] compares two whole snapshots: every key of either side, every
  element of every array.
* [`diff_subset`][steadyloop.replay.diff_subset] compares an expectation with a snapshot, with
  subset semantics: an object in the expectation may leave keys out (only the keys it names are
  compared) — but an empty object `{}` as the value of a key matches only an empty object, so
  `"temp": {}` says that nothing is there (as an array element, `{}` stands for any object) —
  while an array must match element by element and in length.

Both take a fast path on equal sub-documents (one C-level comparison), so the cost is
proportional to what differs, not to the size of the snapshot. Compare *normalised*
documents: the normaliser wraps booleans and floats so that ``true`` never equals
``1`` and ``1.0`` never equals ``1``, as in JSON.

Memory hits whose scores tie may come back in any order:
[`align_ties`][steadyloop.replay.align_ties] puts one side's tied hits in the other side's
order, and says whether it had to. That is the only built-in allowance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from steadyloop.replay._normalise import stack_room

__all__ = ["MISSING", "Difference", "align_ties", "diff", "diff_subset", "escape", "subset_match"]


class _Missing:
    """The marker of a value that is absent on one side."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Stands for a value absent on one side of a [`Difference`][steadyloop.replay.Difference]."""


def escape(token: str) -> str:
    """Escape one JSON Pointer reference token (``~`` → ``~0``, ``/`` → ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True, slots=True)
class Difference:
    """One place where two documents disagree.

    Attributes:
        pointer: The JSON Pointer of the place.
        left: The reference side's value there ([`MISSING`][steadyloop.replay.MISSING] if absent).
        right: The compared side's value there ([`MISSING`][steadyloop.replay.MISSING] if absent).
    """

    pointer: str
    left: Any
    right: Any


def _is_object(value: object) -> bool:
    return isinstance(value, Mapping)


def _is_array(value: object) -> bool:
    return isinstance(value, list | tuple)


def _same(a: Any, b: Any) -> bool:
    # Normalised documents wrap booleans and floats (see the normaliser), so Python
    # equality here is JSON equality: ``true`` is not ``1`` and ``1.0`` is not ``1``.
    return bool(a == b)


def diff(left: Any, right: Any, pointer: str = "") -> list[Difference]:
    """Return every difference between two JSON documents, in document order.

    Args:
        left: The reference document.
        right: The compared document.
        pointer: The JSON Pointer of both documents inside a bigger one.
    """
    out: list[Difference] = []
    with stack_room():
        _walk(left, right, pointer, out)
    return out


def _walk(left: Any, right: Any, pointer: str, out: list[Difference]) -> None:
    if _is_object(left) and _is_object(right):
        if left == right:
            return
        for key in sorted(set(left) | set(right)):
            where = f"{pointer}/{escape(key)}"
            if key not in right:
                out.append(Difference(where, left[key], MISSING))
            elif key not in left:
                out.append(Difference(where, MISSING, right[key]))
            else:
                _walk(left[key], right[key], where, out)
        return
    if _is_array(left) and _is_array(right):
        if left == right:
            return
        common = min(len(left), len(right))
        for i in range(common):
            _walk(left[i], right[i], f"{pointer}/{i}", out)
        for i in range(common, len(left)):
            out.append(Difference(f"{pointer}/{i}", left[i], MISSING))
        for i in range(common, len(right)):
            out.append(Difference(f"{pointer}/{i}", MISSING, right[i]))
        return
    if not _same(left, right):
        out.append(Difference(pointer, left, right))


def subset_match(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` matches ``expected`` with subset semantics (see the module doc)."""
    return not diff_subset(expected, actual)


def diff_subset(expected: Any, actual: Any, pointer: str = "") -> list[Difference]:
    """Return where ``actual`` fails to match the partial document ``expected``.

    Args:
        expected: The partial document (the reference side of each difference).
        actual: The document checked against it.
        pointer: The JSON Pointer of both inside a bigger document.
    """
    out: list[Difference] = []
    with stack_room():
        _walk_subset(expected, actual, pointer, out)
    return out


def _walk_subset(
    expected: Any, actual: Any, pointer: str, out: list[Difference], *, keyed: bool = False
) -> None:
    if _is_object(expected) and _is_object(actual):
        if keyed and not expected and actual:
            out.append(Difference(pointer, expected, actual))  # {}: nothing may be there
            return
        for key in sorted(expected):
            where = f"{pointer}/{escape(key)}"
            if key not in actual:
                out.append(Difference(where, expected[key], MISSING))
            else:
                _walk_subset(expected[key], actual[key], where, out, keyed=True)
        return
    if _is_array(expected) and _is_array(actual):
        common = min(len(expected), len(actual))
        for i in range(common):
            _walk_subset(expected[i], actual[i], f"{pointer}/{i}", out)
        for i in range(common, len(expected)):
            out.append(Difference(f"{pointer}/{i}", expected[i], MISSING))
        for i in range(common, len(actual)):
            out.append(Difference(f"{pointer}/{i}", MISSING, actual[i]))
        return
    if not _same(expected, actual):
        out.append(Difference(pointer, expected, actual))


def align_ties(
    reference: Sequence[Any],
    hits: Sequence[Any],
    matches: Callable[[Any, Any], bool],
) -> tuple[list[Any], bool]:
    """Reorder hits that tie in score to follow the reference's order, where possible.

    Hits are JSON objects with a ``score``. Within each run of equal scores in
    ``hits``, each position is given the first unused hit of the run that
    ``matches`` the reference's element at that position. Hits with different scores
    are never moved.

    Args:
        reference: The reference hits (or expected, partial hits).
        hits: The hits to align.
        matches: Whether a reference element accepts a hit.

    Returns:
        The aligned hits, and whether any hit moved (the allowance was used).
    """
    out = list(hits)
    moved = False
    i = 0
    while i < len(out):
        score = out[i].get("score") if isinstance(out[i], Mapping) else None
        j = i + 1
        while (
            j < len(out)
            and isinstance(out[j], Mapping)
            and score is not None
            and out[j].get("score") == score
        ):
            j += 1
        if j - i > 1 and j <= len(reference):
            group = out[i:j]
            used = [False] * len(group)
            order: list[int] = []
            for k in range(i, j):
                pick = next(
                    (
                        g
                        for g, hit in enumerate(group)
                        if not used[g] and matches(reference[k], hit)
                    ),
                    None,
                )
                if pick is None:
                    order = []
                    break
                used[pick] = True
                order.append(pick)
            if order and order != list(range(len(group))):
                out[i:j] = [group[g] for g in order]
                moved = True
        i = j
    return out, moved
