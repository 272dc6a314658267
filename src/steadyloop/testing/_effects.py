"""Counting effects outside the store under test, and the crash model the kits share.

**The crash model: process death.** A crash kit must model what a killed process
leaves behind, not what a polite shutdown does:

1. At the crash point the process stops: [SimulatedCrash][steadyloop.testing.SimulatedCrash]
   is raised there (a `BaseException`, so code under test cannot swallow it), and
   every later call on the dead process's journal raises it too, from background
   tasks as well: nothing after the crash reaches the store.
2. Nothing is closed. ``close()``, flushes and finalisers of the dead journal never
   run, so a journal that holds writes back until ``close()`` loses them, exactly as
   it would on a kill. [abandon][steadyloop.testing.abandon] does this.
3. What the kernel frees is freed: open files and the locks on them, so the next
   "process" can open the same store. A backend says how through an optional method,
   ``_release_after_death()`` (the JSONL journal closes its descriptors, which drops
   its ``flock``); without one nothing is freed, which is right for in-memory stores
   and servers (a server sees an idle connection; a new one is independent).

**Effects are counted outside the store.** What a tool did must not be read back
from the journal under test (that is what is being tested). An
[EffectSink][steadyloop.testing.EffectSink] is an append-only file, each effect one
line written with one ``write`` and made durable with ``fsync`` before the tool
returns, so it is exact across processes and across real kills.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from steadyloop.journal import ForwardingJournal, Journal

__all__ = ["EffectSink", "Repeat", "abandon"]


@dataclass(frozen=True, slots=True)
class Repeat:
    """One action whose effect happened more than once.

    Attributes:
        tool: The tool (``"model"`` for a model call).
        policy: The replay policy it was declared under (``"safe"`` or ``"never"``).
        action: Which action: the same for every attempt at it (for a loop tool,
            ``run_id/step/index``).
        count: How many times the effect happened.
    """

    tool: str
    policy: str
    action: str
    count: int


class EffectSink:
    """An fsynced, append-only log of effects, exact across processes and kills.

    Args:
        path: The file; created if missing. Several processes may append at once
            (``O_APPEND``, one ``write`` per line).

    Examples:
        ```python
        sink = EffectSink(tmp_path / "effects.log")
        sink.record("send_email", "never", "run-1/2/0")   # inside the tool, before it returns
        assert not sink.repeats()
        ```
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def record(self, tool: str, policy: str, action: str, **details: Any) -> None:
        """Append one effect durably (``fsync``) before returning.

        Args:
            tool: What acted.
            policy: The replay policy it was declared under.
            action: The action's identity across attempts.
            **details: Anything else worth keeping (JSON values).
        """
        line = json.dumps(
            {"action": action, "policy": policy, "tool": tool, **details},
            sort_keys=True,
            ensure_ascii=True,
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            # Newline first too: a line torn by a kill stays a line of its own.
            os.write(fd, b"\n" + line.encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)

    def effects(self) -> list[dict[str, Any]]:
        """Every effect recorded, in order.

        A line cut short by a kill in the middle of its ``write`` is not an effect
        record (the tool had not returned); it is skipped.
        """
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return []
        out: list[dict[str, Any]] = []
        for raw in data.split(b"\n"):
            if not raw:
                continue
            try:
                effect = json.loads(raw)
            except ValueError:
                continue  # torn by a kill
            if isinstance(effect, dict):
                out.append(effect)
        return out

    def repeats(self, prefix: str = "") -> list[Repeat]:
        """Actions (whose identity starts with ``prefix``) whose effect happened twice or more."""
        counts: Counter[tuple[str, str, str]] = Counter(
            (e["tool"], e["policy"], e["action"])
            for e in self.effects()
            if str(e["action"]).startswith(prefix)
        )
        return [Repeat(t, p, a, n) for (t, p, a), n in sorted(counts.items()) if n > 1]


def abandon(journal: Journal) -> None:
    """Leave a journal as a killed process would: unclosed, with OS resources freed.

    Calls ``_release_after_death()`` on the journal (and on the journals a
    [ForwardingJournal][steadyloop.journal.ForwardingJournal] wraps) where a backend
    defines it; never ``close()``. See the module's crash model.
    """
    current: Journal | None = journal
    while current is not None:
        release = getattr(current, "_release_after_death", None)
        if callable(release):
            release()
        current = current.inner if isinstance(current, ForwardingJournal) else None
