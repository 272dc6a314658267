"""Intent before effect for another runtime's tools: the records and the decisions.

A guarded effect has a **key**: what identifies the same effect when the runtime
executes it again after a crash (each integration says how it builds one). Its
records live in one journal stream per key, ``["effect", *key]`` as canonical JSON,
in the guard's namespace, with the loop's own record kinds and payload fields:

``effect.intent`` (``intent_id``, ``policy``, ``what`` = ``"tool"``, ``tool``,
    ``arguments``, ``attempt``, ``key``)
    Durable before the effect runs.
``effect.result`` (``intent_id``, ``status`` and ``value`` or ``error``;
    ``resolved_by`` and ``note`` when a caller decided)
    Durable after it. ``status`` is ``ok`` or ``error`` when the effect happened,
    ``interrupted`` when a `SAFE` effect is run again after a crash, and
    ``not_happened`` when a caller said it did not happen.

What a re-executed effect finds decides what happens (`begin`):

* a result → the recorded value is returned (or, for a `NEVER` effect, the recorded
  error raised as [EffectFailed][steadyloop.integrations.EffectFailed]); a `SAFE`
  effect that failed runs again;
* an intent without a result → a `SAFE` effect runs again under a new intent; a
  `NEVER` effect is **unknown**: nothing is guessed, and the integration surfaces it
  through the runtime's own human-in-the-loop mechanism until a caller records what
  really happened (`decide`), exactly as `steadyloop runs resolve` does for a run;
* nothing → a new intent, then the effect.

The optimistic concurrency of the journal makes two live executions of one effect
exclusive: the second one's intent conflicts, and it is refused with
[EffectBusy][steadyloop.integrations.EffectBusy].
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from steadyloop._errors import ConflictError, EffectBusy, GuardError
from steadyloop.journal import Journal, StreamWrite, open_journal
from steadyloop.loop import Happened, NotHappened, ReplayPolicy
from steadyloop.records import (
    INTENT_KIND,
    RESULT_KIND,
    JSONValue,
    RecordFactory,
    canonical_json,
    check_canonical,
)

__all__ = [
    "Begun",
    "EffectRecords",
    "Guard",
    "Recorded",
    "Unknown",
    "current_intent",
    "decision_from",
]

T = TypeVar("T")

DONE = ("ok", "error")
"""Result statuses that mean the effect happened."""

_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steadyloop_current_intent", default=None
)


def current_intent() -> str | None:
    """Return the intent id of the guarded effect running now (None outside one).

    An effect can pass it on (to an outbox, a payment's metadata) so that a person
    deciding an unknown effect later can look it up there.
    """
    return _CURRENT.get()


@dataclass(frozen=True, slots=True)
class Recorded:
    """The effect already happened; its outcome as recorded.

    Attributes:
        intent_id: The intent it answered.
        value: What the effect returned (when ``error`` is None).
        error: The error it ended with, as text.
    """

    intent_id: str
    value: JSONValue = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Begun:
    """A new intent is durable: run the effect, then finish it.

    Attributes:
        stream: The key's stream.
        intent_id: The new intent.
        next_seq: The sequence number the result will get.
    """

    stream: str
    intent_id: str
    next_seq: int


@dataclass(frozen=True, slots=True)
class Unknown:
    """A `NEVER` effect whose outcome is not known: a caller must decide.

    Attributes:
        intent_id: The intent without a result (or the recorded one whose arguments
            differ from this call's).
        tool: The effect's name.
        key: Its key.
        recorded_arguments: The arguments the intent recorded.
        arguments: The arguments of this call.
        reason: ``"no_result"`` (the process died between intent and result, or the
            effect timed out) or ``"arguments_changed"`` (the runtime executes the
            effect again with other arguments than it recorded).
    """

    intent_id: str
    tool: str
    key: tuple[str | int, ...]
    recorded_arguments: JSONValue
    arguments: JSONValue
    reason: str

    def to_json(self) -> dict[str, JSONValue]:
        """Return what a person needs to decide, as JSON."""
        return {
            "steadyloop": "effect_state_unknown",
            "intent_id": self.intent_id,
            "tool": self.tool,
            "key": list(self.key),
            "reason": self.reason,
            "recorded_arguments": self.recorded_arguments,
            "arguments": self.arguments,
            "decide": {
                "happened": {"happened": True, "value": "<what it returned>", "note": "..."},
                "failed": {"happened": True, "error": "<the error>", "note": "..."},
                "not_happened": {"happened": False, "note": "..."},
            },
        }


def decision_from(value: object) -> Happened | NotHappened:
    """Read a caller's decision given through a runtime's resume mechanism.

    Args:
        value: [Happened][steadyloop.loop.Happened] or
            [NotHappened][steadyloop.loop.NotHappened], or their JSON form:
            ``{"happened": true, "value": …}``, ``{"happened": true, "error": "…"}``,
            ``{"happened": false}``, each with an optional ``"note"``.

    Raises:
        GuardError: The value is none of these.
    """
    if isinstance(value, Happened | NotHappened):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("happened"), bool):
        note = value.get("note", "")
        if not isinstance(note, str):
            raise GuardError(f"a decision's note must be text, got {note!r}")
        if not value["happened"]:
            return NotHappened(note=note)
        error = value.get("error")
        if error is not None and not isinstance(error, str):
            raise GuardError(f"a decision's error must be text, got {error!r}")
        return Happened(value=value.get("value"), error=error, note=note)
    raise GuardError(
        "a decision is {'happened': true, 'value': ...}, {'happened': true, 'error': '...'} "
        f"or {{'happened': false}}; got {value!r}"
    )


class EffectRecords:
    """The intents and results of guarded effects in a Steadyloop journal.

    Args:
        journal: Any Steadyloop journal.
        namespace: The journal namespace the records go to.
        records: Where record ids and times come from.
    """

    def __init__(
        self, journal: Journal, namespace: str = "effects", records: RecordFactory | None = None
    ) -> None:
        self.journal = journal
        self.namespace = namespace
        self.records = records or RecordFactory()

    @staticmethod
    def stream(key: Sequence[str | int]) -> str:
        """Return the stream of an effect key."""
        return canonical_json(["effect", *key])

    async def _fold(self, stream: str) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
        """Return the head, the last intent and its result (None if it has none)."""
        head, intent, result, _ = await self._fold_all(stream)
        return head, intent, result

    async def decisions(self, key: Sequence[str | int]) -> int:
        """Return how many times a caller decided this effect.

        Each decision answered one question the runtime asked (a LangGraph
        ``interrupt``), so a re-executed call asks as many again, in order, before
        its own: the runtime's answers are matched by position.
        """
        return (await self._fold_all(self.stream(key)))[3]

    async def _fold_all(
        self, stream: str
    ) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None, int]:
        """Return the head, the last intent, its result and the number of decisions."""
        stored = await self.journal.read(self.namespace, stream)
        intent: dict[str, Any] | None = None
        result: dict[str, Any] | None = None
        decided = 0
        after_not_happened = False  # its decision is counted already
        for rec in stored:
            payload = rec.record.payload
            if rec.record.kind == RESULT_KIND and payload.get("resolved_by") == "caller":
                decided += 1
            elif rec.record.kind == INTENT_KIND and payload.get("decided") is True:
                decided += 0 if after_not_happened else 1
            after_not_happened = (
                rec.record.kind == RESULT_KIND
                and payload.get("resolved_by") == "caller"
                and payload.get("status") == "not_happened"
            )
            if rec.record.kind == INTENT_KIND:
                intent, result = dict(rec.record.payload), None
            elif (
                rec.record.kind == RESULT_KIND
                and intent is not None
                and rec.record.payload.get("intent_id") == intent["intent_id"]
            ):
                result = dict(rec.record.payload)
        return (stored[-1].seq if stored else 0), intent, result, decided

    @staticmethod
    def _judge(
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        intent: dict[str, Any] | None,
        result: dict[str, Any] | None,
    ) -> Recorded | Unknown | None:
        """What the records say of this call: done, unknown, or None (it must run)."""
        if intent is None:
            return None
        same = canonical_json(intent.get("arguments")) == canonical_json(arguments)
        status = None if result is None else result.get("status")
        if result is not None and status in DONE and same:
            if status == "ok":
                return Recorded(intent["intent_id"], result.get("value"))
            if policy is ReplayPolicy.NEVER:
                return Recorded(intent["intent_id"], error=str(result.get("error")))
            return None
        if policy is ReplayPolicy.NEVER and (status is None or status in DONE):
            reason = "no_result" if status is None else "arguments_changed"
            return Unknown(
                intent["intent_id"], tool, tuple(key), intent.get("arguments"), arguments, reason
            )
        return None

    async def find(
        self, key: Sequence[str | int], tool: str, policy: ReplayPolicy, arguments: JSONValue
    ) -> Recorded | Unknown | None:
        """Look an effect up without writing: done, unknown, or None (it would run)."""
        _, intent, result = await self._fold(self.stream(key))
        return self._judge(key, tool, policy, arguments, intent=intent, result=result)

    async def open_intent(self, key: Sequence[str | int], intent_id: str) -> Unknown | None:
        """Return the unknown `NEVER` effect whose open intent is ``intent_id``, if it is one.

        None when that intent is not the key's last, is not `NEVER`, or has a result.
        """
        _, intent, result = await self._fold(self.stream(key))
        if intent is None or intent.get("intent_id") != intent_id or result is not None:
            return None
        if intent.get("policy") != ReplayPolicy.NEVER.value:
            return None
        return Unknown(
            intent_id,
            str(intent.get("tool")),
            tuple(key),
            intent.get("arguments"),
            intent.get("arguments"),
            "no_result",
        )

    async def begin(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        again: bool = False,
    ) -> Recorded | Begun | Unknown:
        """Look up an effect by its key and, if it must run, make its intent durable.

        Args:
            key: What identifies the effect across re-executions.
            tool: The effect's name.
            policy: Whether it may be repeated.
            arguments: Its arguments (JSON), recorded with the intent.
            again: Run it under a new intent whatever the last one says (a caller
                decided that this call's effect has not happened).

        Raises:
            EffectBusy: Another live execution wrote an intent for the same key at
                the same moment.
            EncodingError: The arguments have no canonical JSON form.
        """
        check_canonical(arguments)
        stream = self.stream(key)
        head, intent, result = await self._fold(stream)
        if not again:
            found = self._judge(key, tool, policy, arguments, intent=intent, result=result)
            if found is not None:
                return found
        batch = []
        if intent is not None and result is None:
            # An effect that may not have finished (SAFE, or decided not to have
            # happened): say so, then run it again under a new intent.
            batch.append(
                self.records(
                    RESULT_KIND, {"intent_id": intent["intent_id"], "status": "interrupted"}
                )
            )
        attempt = 1 if intent is None else int(intent.get("attempt", 0)) + 1
        intent_id = f"{stream}#{attempt}"
        payload: dict[str, JSONValue] = {
            "intent_id": intent_id,
            "policy": policy.value,
            "what": "tool",
            "tool": tool,
            "arguments": arguments,
            "attempt": attempt,
            "key": list(key),
        }
        if again:
            payload["decided"] = True
        batch.append(self.records(INTENT_KIND, payload))
        try:
            await self.journal.append(self.namespace, [StreamWrite(stream, batch, head + 1)])
        except ConflictError:
            raise EffectBusy(
                f"another execution of effect {tool!r} (key {list(key)!r}) wrote its intent "
                "at the same time; this one does not run"
            ) from None
        return Begun(stream, intent_id, head + 1 + len(batch))

    async def finish(
        self, begun: Begun, *, value: JSONValue = None, error: str | None = None
    ) -> None:
        """Make the effect's outcome durable (its result record).

        Raises:
            EncodingError: The value has no canonical JSON form (nothing is written;
                the intent stays open, so a `NEVER` effect becomes unknown).
        """
        payload: dict[str, JSONValue] = {"intent_id": begun.intent_id}
        if error is None:
            payload.update(status="ok", value=value)
        else:
            payload.update(status="error", error=error)
        check_canonical(payload)
        await self.journal.append(
            self.namespace,
            [StreamWrite(begun.stream, [self.records(RESULT_KIND, payload)], begun.next_seq)],
        )

    async def decide(self, unknown: Unknown, outcome: Happened | NotHappened) -> Recorded | None:
        """Record a caller's decision about an unknown effect.

        Returns:
            What the effect returned when it happened (the call returns that), or
            None when it did not (the call runs it under a new intent).

        Raises:
            EffectBusy: The effect's records changed since it was found unknown.
        """
        stream = self.stream(unknown.key)
        head, intent, _ = await self._fold(stream)
        base = {"resolved_by": "caller", "note": outcome.note}
        batch = []
        target = unknown.intent_id
        if intent is not None and intent["intent_id"] != unknown.intent_id:
            raise EffectBusy(f"effect {unknown.tool!r} changed while a decision was made")
        if unknown.reason == "arguments_changed":
            if isinstance(outcome, NotHappened):
                return None  # begin() then runs it under a new intent
            # Record this call as an effect of its own whose outcome the caller gave.
            target = f"{stream}#{int((intent or {}).get('attempt', 0)) + 1}"
            batch.append(
                self.records(
                    INTENT_KIND,
                    {
                        "intent_id": target,
                        "policy": ReplayPolicy.NEVER.value,
                        "what": "tool",
                        "tool": unknown.tool,
                        "arguments": unknown.arguments,
                        "attempt": int((intent or {}).get("attempt", 0)) + 1,
                        "key": list(unknown.key),
                    },
                )
            )
        payload: dict[str, JSONValue] = {"intent_id": target, **base}
        if isinstance(outcome, NotHappened):
            payload["status"] = "not_happened"
        elif outcome.error is not None:
            payload.update(status="error", error=outcome.error)
        else:
            payload.update(status="ok", value=outcome.value)
        check_canonical(payload)
        batch.append(self.records(RESULT_KIND, payload))
        await self.journal.append(self.namespace, [StreamWrite(stream, batch, head + 1)])
        if isinstance(outcome, NotHappened):
            return None
        return Recorded(target, outcome.value, outcome.error)


class Bridge:
    """A private event loop in a daemon thread, so sync and async callers share one journal.

    A runtime may call a tool from a worker thread (LangGraph's sync nodes) or from
    its own event loop; the journal lives on this loop either way.

    Args:
        name: The thread's name.
    """

    def __init__(self, name: str = "steadyloop-guard") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule a coroutine on the bridge's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the bridge's loop and wait for it (from any other thread)."""
        if threading.current_thread() is self._thread:
            raise GuardError("a guarded effect cannot be called from the guard's own loop")
        return self.submit(coro).result()

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the bridge's loop and await it from another loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        """Stop the loop and its thread (after everything scheduled ran)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


async def _open_records(
    url: str,
    namespace: str,
    wrap: Callable[[Journal], Journal] | None,
    records: RecordFactory | None,
) -> EffectRecords:
    """Open a journal by URL (on the running loop) as effect records."""
    journal: Journal = await open_journal(url)
    if wrap is not None:
        journal = wrap(journal)
    return EffectRecords(journal, namespace, records)


class Guard:
    """What every guard shares: its journal, opened by URL on a loop of its own.

    Args:
        url: The journal the intents and results go to (any Steadyloop backend).
        namespace: The journal namespace for them.
        wrap: Wraps the opened journal (test kits use it to model a crash).
        records: Where record ids and times come from.

    Attributes:
        records: The guard's [EffectRecords][steadyloop.integrations.EffectRecords].
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        wrap: Callable[[Journal], Journal] | None = None,
        records: RecordFactory | None = None,
    ) -> None:
        self._bridge = Bridge()
        try:
            self.records: EffectRecords = self._bridge.run(
                _open_records(url, namespace, wrap, records)
            )
        except BaseException:
            self._bridge.stop()
            raise

    def close(self) -> None:
        """Close the journal and stop the guard's thread."""
        self._bridge.run(self.records.journal.close())
        self._bridge.stop()

    def abandon(self) -> None:
        """Stop the guard's thread without closing its journal, as a killed process would."""
        self._bridge.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
