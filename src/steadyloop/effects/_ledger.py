"""The effect ledger: intent before effect, keyed by what identifies an effect.

A guarded effect has a **key**: what identifies the same effect when a runtime
executes it again after a crash (each integration says how it builds one, from what
the runtime's history keeps stable). Its records live in one journal stream per key,
``["effect", *key]`` (`steadyloop._names.effect_stream`), with the loop's own record
kinds and payload fields:

``effect.intent`` (``intent_id``, ``policy``, ``what`` = ``"tool"``, ``tool``,
    ``arguments``, ``attempt``, ``key``, ``owner``)
    Durable before the effect runs. ``owner`` is the process that runs it
    ([Owner][steadyloop.effects.Owner]).
``effect.result`` (``intent_id``, ``status`` and ``value`` or ``error``;
    ``resolved_by`` and ``note`` when a caller decided)
    Durable after it. ``status`` is ``ok`` or ``error`` when the effect happened,
    ``raised`` when it raised and nobody said whether it acted, ``interrupted`` when
    a `SAFE` effect is run again after a crash, and ``not_happened`` when a caller
    (or the guard, for an exception declared to mean so) said it did not happen.

What a re-executed effect finds decides what happens (`EffectLedger.begin`):

* a result → the recorded value is returned (or, for a `NEVER` effect, the recorded
  error raised as [EffectFailed][steadyloop.EffectFailed]); a `SAFE` effect that
  failed runs again;
* an intent without a result whose owner is alive → [EffectBusy][steadyloop.EffectBusy]
  at once, or after ``wait`` seconds if it is still running then;
* an intent without a result whose owner is gone, or a `NEVER` effect that raised →
  a `SAFE` effect runs again under a new intent; a `NEVER` effect is **unknown**:
  nothing is guessed, and the integration surfaces it through the runtime's own
  human-in-the-loop mechanism until a caller records what really happened
  (`EffectLedger.decide`), as ``steadyloop runs resolve`` does for a run;
* an intent for other arguments or another tool than this call's → for a `NEVER`
  effect, unknown (the runtime asks for something else than it recorded);
* nothing → a new intent, then the effect.

**Task streams.** A runtime whose task makes several calls of one effect (a LangGraph
node) may keep them in one stream, the task's, each call told apart by its ``call``
(`EffectLedger.begin` with ``call=``): one read then sees a call's siblings. Its intents
also record ``call`` and ``execution`` (which execution of the task wrote it), and an
intent that takes an earlier one over ``claims`` (that intent's id). A `NEVER` call
found under no ``call`` of the stream, passed an ``execution``, while an earlier
execution left an intent that no call of this execution has claimed, is unknown
(``arguments_changed``, naming that intent): answered "it happened", the call takes
the intent over with the value given; answered "it did not", it runs under an intent
of its own that takes the earlier one over. Either way no later execution asks again.

Values are recorded as JSON, with tuples tagged (``{"$tuple": [...]}``, and an object
whose one key is a tag wrapped as ``{"$object": {...}}``), so a replayed value has the
type the effect returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, overload

from steadyloop import _names
from steadyloop._errors import ConflictError, EffectBusy, GuardError
from steadyloop.effects._outcomes import (
    DONE_STATUSES,
    REDO_STATUSES,
    Happened,
    NotHappened,
    ReplayPolicy,
    decision_payload,
    interrupted,
)
from steadyloop.effects._owner import LIVE_TOKENS, Owner
from steadyloop.journal import Journal, StreamWrite
from steadyloop.records import (
    INTENT_KIND,
    RESULT_KIND,
    JSONValue,
    Record,
    RecordFactory,
    canonical_json,
    check_canonical,
)

__all__ = [
    "Begun",
    "EffectLedger",
    "Recorded",
    "Unknown",
    "acting",
    "current_intent",
    "describe",
]

_log = logging.getLogger("steadyloop.effects")

_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steadyloop_current_intent", default=None
)

_TAGS = frozenset({"$tuple", "$object"})
_POLL_S = 0.05
_KEPT_STREAMS = 4096
"""How many task streams' locks and heads a ledger keeps (idle ones are dropped)."""


def current_intent() -> str | None:
    """Return the intent id of the guarded effect running now (None outside one).

    An effect can pass it on (to an outbox, a payment's metadata) so that a person
    deciding an unknown effect later can look it up there.
    """
    return _CURRENT.get()


@contextlib.contextmanager
def acting(begun: Begun) -> Iterator[None]:
    """Run the effect of ``begun`` in this block, as the current intent.

    An execution that leaves the block by an exception no guard records (a
    cancellation, a modelled crash) is no longer live: its open intent then reads
    as that of a dead owner.
    """
    token = _CURRENT.set(begun.intent_id)
    try:
        yield
    except BaseException:
        LIVE_TOKENS.discard(begun.token)
        raise
    finally:
        _CURRENT.reset(token)


def describe(exc: BaseException) -> str:
    """How an exception is recorded: its type and its text.

    The text always has a JSON form (lone surrogates are escaped), and an exception
    whose ``__str__`` raises is still described.
    """
    try:
        text = str(exc).encode("utf-8", "backslashreplace").decode("utf-8")
    except Exception as inner:  # its __str__ raised: the effect still gets a record
        text = f"<str() of this exception raised {type(inner).__name__}>"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _encode(value: object) -> object:
    """A value as recorded: tuples tagged, tag-like objects wrapped."""
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        out = {k: _encode(v) for k, v in value.items()}
        return {"$object": out} if len(out) == 1 and next(iter(out)) in _TAGS else out
    return value


def _decode(value: object) -> Any:
    """The value an effect returned, from its record (see `_encode`)."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == "$tuple" and isinstance(inner, list):
                return tuple(_decode(v) for v in inner)
            if tag == "$object" and isinstance(inner, dict):
                return {k: _decode(v) for k, v in inner.items()}
        return {k: _decode(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, slots=True)
class Recorded:
    """The effect already happened; its outcome as recorded.

    Attributes:
        intent_id: The intent it answered.
        value: What the effect returned (when ``error`` is None), with its tuples.
        error: The error it ended with, as text.
    """

    intent_id: str
    value: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Begun:
    """A new intent is durable: run the effect, then finish it.

    Attributes:
        stream: The key's stream.
        intent_id: The new intent.
        next_seq: The sequence number the result will get.
        tool: The effect's name.
        policy: Whether it may be repeated.
        token: The owner token of this execution (live until it is finished).
        shared: Whether the stream is a task stream, shared with the effect's
            sibling calls (its result then goes after whatever they appended).
    """

    stream: str
    intent_id: str
    next_seq: int
    tool: str = ""
    policy: ReplayPolicy = ReplayPolicy.NEVER
    token: str = ""
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Unknown:
    """A `NEVER` effect whose outcome is not known: a caller must decide.

    Attributes:
        intent_id: The intent without a result (or the recorded one whose tool or
            arguments differ from this call's).
        tool: The effect's name.
        key: Its key.
        recorded_arguments: The arguments the intent recorded.
        arguments: The arguments of this call.
        reason: ``"no_result"`` (the process died between intent and result, or the
            effect timed out), ``"raised"`` (the effect raised, and nothing says
            whether it acted first) or ``"arguments_changed"`` (the runtime executes
            the effect again with another tool or other arguments than it recorded).
        owner: The process that wrote the intent, as JSON (None for old records).
        error: What the effect raised (reason ``"raised"``).
        call: In a task stream, this call's identity in it (None in a stream of
            one effect).
        execution: In a task stream, the execution of the task this call belongs to.
        claims: In a task stream, for reason ``"arguments_changed"``: the intent a
            decision about this call takes over (the last of the effect ``intent_id``
            began), so that no later execution asks about it again.
    """

    intent_id: str
    tool: str
    key: tuple[str | int, ...]
    recorded_arguments: JSONValue
    arguments: JSONValue
    reason: str
    owner: JSONValue = None
    error: str | None = None
    call: str | None = None
    execution: str | None = None
    claims: str | None = None

    def to_json(self) -> dict[str, JSONValue]:
        """Return what a person needs to decide, as JSON."""
        out: dict[str, JSONValue] = {
            "steadyloop": "effect_state_unknown",
            "intent_id": self.intent_id,
            "tool": self.tool,
            "key": list(self.key),
            "reason": self.reason,
            "recorded_arguments": self.recorded_arguments,
            "arguments": self.arguments,
            "owner": self.owner,
            "decide": {
                "happened": {"happened": True, "value": "<what it returned>", "note": "..."},
                "failed": {"happened": True, "error": "<the error>", "note": "..."},
                "not_happened": {"happened": False, "note": "..."},
            },
        }
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class _Fold:
    """A key's stream read: its head, last intent, that intent's result, decisions."""

    head: int
    intent: dict[str, Any] | None
    result: dict[str, Any] | None
    decisions: int

    @property
    def status(self) -> str | None:
        return None if self.result is None else str(self.result.get("status"))

    def open_owner(self) -> Owner | None:
        """The owner of the last intent while it has no result (None for old records)."""
        if self.intent is None or self.result is not None:
            return None
        raw = self.intent.get("owner")
        return Owner.from_json(raw) if isinstance(raw, dict) else None


@dataclass(slots=True)
class _Entry:
    """One intent of a task stream, its result, and the intent that took it over."""

    index: int
    payload: dict[str, Any]
    result: dict[str, Any] | None = None
    successor: str | None = None

    @property
    def intent_id(self) -> str:
        return str(self.payload["intent_id"])

    @property
    def call(self) -> str:
        return str(self.payload.get("call"))

    @property
    def status(self) -> str | None:
        return None if self.result is None else str(self.result.get("status"))

    def open_owner(self) -> Owner | None:
        """The owner of this intent while it has no result (None for old records)."""
        raw = self.payload.get("owner")
        return Owner.from_json(raw) if self.result is None and isinstance(raw, dict) else None


@dataclass(slots=True)
class _Task:
    """A task stream read: every call's intents, in order, and its decisions."""

    head: int
    entries: dict[str, _Entry] = field(default_factory=dict)
    by_call: dict[str, str] = field(default_factory=dict)
    decisions: Counter[str] = field(default_factory=Counter)

    def latest(self, call: str) -> _Entry | None:
        """The last intent a call wrote, if any."""
        intent_id = self.by_call.get(call)
        return None if intent_id is None else self.entries[intent_id]

    def last(self, entry: _Entry) -> _Entry:
        """The last intent of the effect ``entry`` belongs to (after every take-over)."""
        while entry.successor is not None:
            entry = self.entries[entry.successor]
        return entry

    def calls(self, entry: _Entry) -> set[str]:
        """The calls whose intents make up the effect ending with ``entry``."""
        out = {entry.call}
        claims = entry.payload.get("claims")
        while isinstance(claims, str) and claims in self.entries:
            entry = self.entries[claims]
            out.add(entry.call)
            claims = entry.payload.get("claims")
        return out

    def acting(self, entry: _Entry) -> _Entry:
        """The intent under which the effect of ``entry`` acted.

        A call whose question was answered "it happened" took the earlier intent
        over without acting: the effect is that earlier intent's.
        """
        while (
            isinstance(entry.payload.get("claims"), str)
            and entry.payload["claims"] in self.entries
            and entry.result is not None
            and entry.result.get("resolved_by") == "caller"
            and entry.status in DONE_STATUSES
        ):
            entry = self.entries[str(entry.payload["claims"])]
        return entry


class EffectLedger:
    """The intents and results of effects, one journal stream per effect key.

    The one place that says what an effect's records mean: every guard is its
    client, and the loop driver builds its run stream's effect records from the same
    vocabulary ([ReplayPolicy][steadyloop.effects.ReplayPolicy], the statuses and
    [Happened][steadyloop.effects.Happened] / [NotHappened][steadyloop.effects.NotHappened]).

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
        self._locks: dict[str, asyncio.Lock] = {}
        self._heads: dict[str, int] = {}

    @staticmethod
    def stream(key: Sequence[str | int]) -> str:
        """Return the stream of an effect key.

        Raises:
            GuardError: The key cannot name a stream.
        """
        try:
            return _names.effect_stream(key)
        except ValueError as exc:
            raise GuardError(str(exc)) from None

    async def _fold(self, stream: str) -> _Fold:
        stored = await self.journal.read(self.namespace, stream)
        intent: dict[str, Any] | None = None
        result: dict[str, Any] | None = None
        decided = 0
        after_not_happened = False  # its decision is counted already
        for rec in stored:
            kind, payload = rec.record.kind, rec.record.payload
            by_caller = kind == RESULT_KIND and payload.get("resolved_by") == "caller"
            if by_caller:
                decided += 1
            elif kind == INTENT_KIND and payload.get("decided") is True:
                decided += 0 if after_not_happened else 1
            after_not_happened = by_caller and payload.get("status") == "not_happened"
            if kind == INTENT_KIND:
                intent, result = dict(payload), None
            elif (
                kind == RESULT_KIND
                and intent is not None
                and payload.get("intent_id") == intent["intent_id"]
            ):
                result = dict(payload)
        return _Fold(stored[-1].seq if stored else 0, intent, result, decided)

    @staticmethod
    def _judge(
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        fold: _Fold,
    ) -> Recorded | Unknown | None:
        """What the records say of this call: done, unknown, or None (it must run)."""
        intent, result, status = fold.intent, fold.result, fold.status
        if intent is None:
            return None
        same = intent.get("tool") == tool and canonical_json(
            intent.get("arguments")
        ) == canonical_json(arguments)
        if result is not None and status in DONE_STATUSES and same:
            if status == "ok":
                return Recorded(intent["intent_id"], _decode(result.get("value")))
            if policy is ReplayPolicy.NEVER:
                return Recorded(intent["intent_id"], error=str(result.get("error")))
            return None
        if policy is not ReplayPolicy.NEVER:
            return None
        reasons = {None: "no_result", "raised": "raised", "ok": "arguments_changed"}
        reason = reasons.get(status, "arguments_changed" if status in DONE_STATUSES else None)
        if reason is not None:
            return Unknown(
                intent["intent_id"],
                tool,
                tuple(key),
                intent.get("arguments"),
                arguments,
                reason,
                intent.get("owner"),
                None if result is None or status != "raised" else str(result.get("error")),
            )
        return None

    async def find(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        call: str | None = None,
        execution: str | None = None,
        claimed: Collection[str] = (),
    ) -> Recorded | Unknown | None:
        """Look an effect up without writing: done, unknown, or None (it would run).

        ``call``, ``execution`` and ``claimed`` are those of `begin`.
        """
        if call is not None:
            task = await self._fold_task(self.stream(key))
            found, _ = self._judge_call(
                key,
                tool,
                policy,
                arguments,
                task,
                call=call,
                execution=execution,
                claimed=claimed,
            )
            return found
        fold = await self._fold(self.stream(key))
        return self._judge(key, tool, policy, arguments, fold)

    async def open_intent(self, key: Sequence[str | int], intent_id: str) -> Unknown | None:
        """Return the unknown `NEVER` effect whose last intent is ``intent_id``, if it is one.

        None when that intent is not the key's last (in a task stream: its call's), is
        not `NEVER`, or is settled.
        """
        stream = self.stream(key)
        task = await self._fold_task(stream)
        entry = task.entries.get(intent_id)
        if entry is not None and "call" in entry.payload:
            if (
                entry.successor is not None
                or task.by_call.get(entry.call) != intent_id
                or entry.payload.get("policy") != ReplayPolicy.NEVER.value
                or entry.status not in (None, "raised")
            ):
                return None
            return Unknown(
                intent_id,
                str(entry.payload.get("tool")),
                tuple(key),
                entry.payload.get("arguments"),
                entry.payload.get("arguments"),
                "no_result" if entry.result is None else "raised",
                entry.payload.get("owner"),
                None if entry.result is None else str(entry.result.get("error")),
                call=entry.call,
                execution=cast(str | None, entry.payload.get("execution")),
            )
        fold = await self._fold(stream)
        intent = fold.intent
        if intent is None or intent.get("intent_id") != intent_id:
            return None
        if intent.get("policy") != ReplayPolicy.NEVER.value or fold.status not in (None, "raised"):
            return None
        found = self._judge(
            key, str(intent.get("tool")), ReplayPolicy.NEVER, intent.get("arguments"), fold
        )
        return found if isinstance(found, Unknown) else None

    async def _settled(
        self, stream: str, tool: str, key: Sequence[str | int], wait: float | None
    ) -> _Fold:
        """The key's fold once no live owner holds its last intent (or EffectBusy)."""
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            fold = await self._fold(stream)
            owner = fold.open_owner()
            if owner is None or owner.liveness() != "alive":
                return fold
            if deadline is None or time.monotonic() >= deadline:
                raise EffectBusy(
                    f"effect {tool!r} (key {list(key)!r}) is running in process {owner.pid} "
                    f"on {owner.host!r}; this call does not run it"
                    + ("" if wait is None else f" (waited {wait:g} s)")
                )
            await asyncio.sleep(_POLL_S)

    @overload
    async def begin(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        again: bool = ...,
        wait: float | None = ...,
        decided_first: Literal[False] = ...,
        call: str | None = ...,
        execution: str | None = ...,
        claimed: Callable[[], Collection[str]] | None = ...,
        claims: str | None = ...,
    ) -> Recorded | Begun | Unknown: ...

    @overload
    async def begin(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        again: bool = ...,
        wait: float | None = ...,
        decided_first: bool,
        call: str | None = ...,
        execution: str | None = ...,
        claimed: Callable[[], Collection[str]] | None = ...,
        claims: str | None = ...,
    ) -> Recorded | Begun | Unknown | int: ...

    async def begin(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        again: bool = False,
        wait: float | None = None,
        decided_first: bool = False,
        call: str | None = None,
        execution: str | None = None,
        claimed: Callable[[], Collection[str]] | None = None,
        claims: str | None = None,
    ) -> Recorded | Begun | Unknown | int:
        """Look up an effect by its key and, if it must run, make its intent durable.

        Args:
            key: What identifies the effect across re-executions.
            tool: The effect's name.
            policy: Whether it may be repeated.
            arguments: Its arguments (JSON), recorded with the intent.
            again: Run it under a new intent whatever the last one says (a caller
                decided that this call's effect has not happened).
            wait: Seconds to wait for a live owner of the effect to finish it; by
                default a live owner makes the call raise at once.
            decided_first: When callers decided this effect before, return how many
                times instead, and write nothing: a runtime that matches answers to
                questions by their position (LangGraph's ``interrupt``) asks those
                questions again first, then calls ``begin`` again. In the common case
                (no decision) the effect is begun with the same single read.
            call: Makes ``key`` a **task stream**: the stream of every call of this
                effect one task of a runtime makes, told apart by ``call``, their
                identity in it. One read then sees a call's siblings.
            execution: In a task stream, which execution of the task makes this call.
                A `NEVER` call found under no ``call`` of the stream, while an earlier
                execution left an intent that no call of this one has claimed, is
                unknown (``arguments_changed``, naming the first such intent): the
                runtime runs the task again with new arguments (a model in it answered
                otherwise). Only a task that makes its calls one after another may pass
                it: with calls at once, the first unclaimed intent may be a sibling's
                that has not been called yet. None: a call found under no ``call`` is
                a new effect.
            claimed: In a task stream, the calls this execution has made so far (their
                earlier intents are theirs, not candidates for this call).
            claims: With ``again``: the intent a decision about this call took over
                (`Unknown.claims`), recorded so that no later execution asks again.

        Raises:
            EffectBusy: A live execution holds the effect (or wrote its intent at the
                same moment).
            EncodingError: The arguments have no canonical JSON form.
            GuardError: The key cannot name a stream.
        """
        check_canonical(arguments)
        if call is not None:
            return await self._begin_call(
                key,
                tool,
                policy,
                arguments,
                call=call,
                execution=execution,
                claimed=claimed,
                again=again,
                wait=wait,
                decided_first=decided_first,
                claims=claims,
            )
        stream = self.stream(key)
        fold = await self._settled(stream, tool, key, wait)
        if decided_first and fold.decisions:
            return fold.decisions
        intent = fold.intent
        if not again:
            found = self._judge(key, tool, policy, arguments, fold)
            if found is not None:
                return found
        batch = []
        if intent is not None and fold.result is None:
            # An effect that may not have finished (SAFE, or decided not to have
            # happened): say so, then run it again under a new intent.
            batch.append(self.records(RESULT_KIND, interrupted(intent["intent_id"])))
        attempt = 1 if intent is None else int(intent.get("attempt", 0)) + 1
        intent_id = f"{stream}#{attempt}"
        token = uuid.uuid4().hex
        payload = _intent_payload(intent_id, policy, tool, arguments, attempt, key, token)
        if again:
            payload["decided"] = True
        batch.append(self.records(INTENT_KIND, payload))
        await self._append_intent(
            stream,
            batch,
            fold.head,
            token,
            f"another execution of effect {tool!r} (key {list(key)!r}) wrote its intent "
            "at the same time; this one does not run",
        )
        return Begun(stream, intent_id, fold.head + 1 + len(batch), tool, policy, token)

    async def _append_intent(
        self, stream: str, batch: list[Record], head: int, token: str, busy: str
    ) -> None:
        """Append a batch ending in a new intent after ``head``, its token live meanwhile.

        Raises:
            EffectBusy: Another writer appended to the stream first (``busy`` says who).
        """
        LIVE_TOKENS.add(token)
        try:
            await self.journal.append(self.namespace, [StreamWrite(stream, batch, head + 1)])
        except ConflictError:
            LIVE_TOKENS.discard(token)
            raise EffectBusy(busy) from None
        except BaseException:
            LIVE_TOKENS.discard(token)
            raise

    # -- task streams: every call of one effect made by one task, in one stream ----------

    def _lock(self, stream: str) -> asyncio.Lock:
        """The lock that orders this ledger's writes to a task stream."""
        lock = self._locks.get(stream)
        if lock is None:
            if len(self._locks) >= _KEPT_STREAMS:
                for name in [n for n, held in self._locks.items() if not held.locked()]:
                    del self._locks[name]
                    self._heads.pop(name, None)
            lock = self._locks[stream] = asyncio.Lock()
        return lock

    async def _fold_task(self, stream: str) -> _Task:
        stored = await self.journal.read(self.namespace, stream)
        task = _Task(stored[-1].seq if stored else 0)
        after_not_happened: dict[str, bool] = {}  # its decision is counted already
        for rec in stored:
            kind, payload = rec.record.kind, rec.record.payload
            if kind == INTENT_KIND:
                entry = _Entry(len(task.entries), dict(payload))
                call = entry.call
                task.entries[entry.intent_id] = entry
                task.by_call[call] = entry.intent_id
                claims = payload.get("claims")
                if isinstance(claims, str) and claims in task.entries:
                    task.entries[claims].successor = entry.intent_id
                if payload.get("decided") is True and not after_not_happened.get(call):
                    task.decisions[call] += 1
                after_not_happened[call] = False
            elif kind == RESULT_KIND:
                found = task.entries.get(str(payload.get("intent_id")))
                if found is None:
                    continue
                found.result = dict(payload)
                by_caller = payload.get("resolved_by") == "caller"
                if by_caller:
                    task.decisions[found.call] += 1
                after_not_happened[found.call] = (
                    by_caller and payload.get("status") == "not_happened"
                )
        self._heads[stream] = task.head
        return task

    def _judge_call(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        task: _Task,
        *,
        call: str,
        execution: str | None,
        claimed: Collection[str],
    ) -> tuple[Recorded | Unknown | None, _Entry | None]:
        """What a task stream says of this call, and the intent whose live owner blocks it."""
        mine = task.latest(call)
        if mine is not None:
            last = task.last(mine)
            if last is mine:
                fold = _Fold(task.head, mine.payload, mine.result, 0)
                found = self._judge(key, tool, policy, arguments, fold)
                if isinstance(found, Unknown):
                    found = replace(found, call=call, execution=execution)
                return found, mine
            if policy is ReplayPolicy.NEVER and last.payload.get("execution") != execution:
                return self._changed(
                    key, tool, arguments, task, last, call=call, execution=execution
                ), last
            return None, None  # taken over by a call of this execution: an effect of its own
        if policy is not ReplayPolicy.NEVER or execution is None:
            return None, None
        for entry in task.entries.values():
            p = entry.payload
            if (
                entry.successor is not None
                or p.get("execution") == execution
                or p.get("tool") != tool
                or p.get("policy") != ReplayPolicy.NEVER.value
                or entry.status in REDO_STATUSES
                or task.calls(entry) & set(claimed)
            ):
                continue
            return self._changed(
                key, tool, arguments, task, entry, call=call, execution=execution
            ), entry
        return None, None

    @staticmethod
    def _changed(
        key: Sequence[str | int],
        tool: str,
        arguments: JSONValue,
        task: _Task,
        last: _Entry,
        *,
        call: str,
        execution: str | None,
    ) -> Unknown:
        """This call, with new arguments, may be the effect that ``last`` ends: ask."""
        acting = task.acting(last)
        return Unknown(
            acting.intent_id,
            tool,
            tuple(key),
            acting.payload.get("arguments"),
            arguments,
            "arguments_changed",
            acting.payload.get("owner"),
            str(last.result.get("error")) if last.result and last.status == "raised" else None,
            call=call,
            execution=execution,
            claims=last.intent_id,
        )

    async def _begin_call(
        self,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        call: str,
        execution: str | None,
        claimed: Callable[[], Collection[str]] | None,
        again: bool,
        wait: float | None,
        decided_first: bool,
        claims: str | None,
    ) -> Recorded | Begun | Unknown | int:
        """`begin` for a call of a task stream (see `begin`)."""
        stream = self.stream(key)
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            async with self._lock(stream):
                task = await self._fold_task(stream)
                if again:
                    found: Recorded | Unknown | None = None
                    blocking = task.latest(call)
                else:
                    seen = claimed() if claimed is not None else ()
                    found, blocking = self._judge_call(
                        key,
                        tool,
                        policy,
                        arguments,
                        task,
                        call=call,
                        execution=execution,
                        claimed=seen,
                    )
                owner = None if blocking is None else blocking.open_owner()
                if owner is None or owner.liveness() != "alive":
                    if decided_first and task.decisions[call]:
                        return task.decisions[call]
                    if found is not None:
                        return found
                    return await self._write_intent(
                        stream,
                        key,
                        tool,
                        policy,
                        arguments,
                        task=task,
                        call=call,
                        execution=execution,
                        again=again,
                        claims=claims,
                    )
            if deadline is None or time.monotonic() >= deadline:
                raise EffectBusy(
                    f"effect {tool!r} (key {list(key)!r}) is running in process {owner.pid} "
                    f"on {owner.host!r}; this call does not run it"
                    + ("" if wait is None else f" (waited {wait:g} s)")
                )
            await asyncio.sleep(_POLL_S)

    async def _write_intent(
        self,
        stream: str,
        key: Sequence[str | int],
        tool: str,
        policy: ReplayPolicy,
        arguments: JSONValue,
        *,
        task: _Task,
        call: str,
        execution: str | None,
        again: bool,
        claims: str | None,
    ) -> Begun:
        """Make a task stream call's new intent durable (under the stream's lock)."""
        prior = task.latest(call)
        batch = []
        if prior is not None and prior.result is None and prior.successor is None:
            batch.append(self.records(RESULT_KIND, interrupted(prior.intent_id)))
        attempt = 1 if prior is None else int(prior.payload.get("attempt", 0)) + 1
        intent_id = f"{stream}#{len(task.entries) + 1}"
        token = uuid.uuid4().hex
        payload = _intent_payload(intent_id, policy, tool, arguments, attempt, key, token)
        payload.update(call=call, execution=execution)
        if claims is not None:
            payload["claims"] = claims
        if again:
            payload["decided"] = True
        batch.append(self.records(INTENT_KIND, payload))
        await self._append_intent(
            stream,
            batch,
            task.head,
            token,
            f"another process wrote effect {tool!r} (key {list(key)!r}) at the same "
            "time; this call does not run",
        )
        self._heads[stream] = task.head + len(batch)
        return Begun(stream, intent_id, task.head + 1 + len(batch), tool, policy, token, True)

    async def _settle_shared(self, begun: Begun, record: Any) -> None:
        """Append a task stream call's result after whatever its siblings appended."""
        async with self._lock(begun.stream):
            seq = max(begun.next_seq, self._heads.get(begun.stream, 0) + 1)
            try:
                await self.journal.append(
                    self.namespace, [StreamWrite(begun.stream, [record], seq)]
                )
            except ConflictError:
                task = await self._fold_task(begun.stream)
                entry = task.entries.get(begun.intent_id)
                if entry is None:
                    raise GuardError(
                        f"effect {begun.tool!r} ran (intent {begun.intent_id!r}), but its "
                        "records changed meanwhile, so its outcome was not recorded: "
                        f"{canonical_json(record.payload)}"
                    ) from None
                if entry.result is not None:
                    return  # already settled (a decision recorded it)
                seq = task.head + 1
                await self.journal.append(
                    self.namespace, [StreamWrite(begun.stream, [record], seq)]
                )
            self._heads[begun.stream] = seq

    async def _decide_call(
        self, unknown: Unknown, outcome: Happened | NotHappened
    ) -> Recorded | None:
        """`decide` for an unknown call of a task stream (see `decide`)."""
        stream = self.stream(unknown.key)
        changed = EffectBusy(f"effect {unknown.tool!r} changed while a decision was made")
        async with self._lock(stream):
            task = await self._fold_task(stream)
            target = unknown.claims if unknown.reason == "arguments_changed" else None
            entry = task.entries.get(target or unknown.intent_id)
            if entry is None or entry.successor is not None:
                raise changed
            if target is None and task.by_call.get(entry.call) != entry.intent_id:
                raise changed
            owner = entry.open_owner()
            if owner is not None and owner.liveness() == "alive":
                raise EffectBusy(
                    f"effect {unknown.tool!r} is still running in process {owner.pid} on "
                    f"{owner.host!r}; decide once it has ended"
                )
            batch = []
            decided = unknown.intent_id
            if target is not None:
                if isinstance(outcome, NotHappened):
                    return None  # begin(again=True, claims=...) runs it under a new intent
                # This call takes the effect over: an intent of its own, with the outcome
                # the caller gave (the effect acted under the earlier intent).
                prior = task.latest(str(unknown.call))
                decided = f"{stream}#{len(task.entries) + 1}"
                batch.append(
                    self.records(
                        INTENT_KIND,
                        {
                            "intent_id": decided,
                            "policy": ReplayPolicy.NEVER.value,
                            "what": "tool",
                            "tool": unknown.tool,
                            "arguments": unknown.arguments,
                            "attempt": 1 if prior is None else int(prior.payload["attempt"]) + 1,
                            "key": list(unknown.key),
                            "call": unknown.call,
                            "execution": unknown.execution,
                            "claims": target,
                        },
                    )
                )
            encoded = None if isinstance(outcome, NotHappened) else _encode(outcome.value)
            payload = decision_payload(decided, outcome, cast(JSONValue, encoded))
            check_canonical(payload)
            batch.append(self.records(RESULT_KIND, payload))
            try:
                await self.journal.append(
                    self.namespace, [StreamWrite(stream, batch, task.head + 1)]
                )
            except ConflictError:
                raise changed from None
            self._heads[stream] = task.head + len(batch)
        if isinstance(outcome, NotHappened):
            return None
        return Recorded(decided, outcome.value, outcome.error)

    async def _settle(self, begun: Begun, payload: dict[str, JSONValue]) -> None:
        """Append an effect's result; its execution is no longer live afterwards."""
        try:
            record = self.records(RESULT_KIND, payload)
            if begun.shared:
                await self._settle_shared(begun, record)
                return
            try:
                await self.journal.append(
                    self.namespace, [StreamWrite(begun.stream, [record], begun.next_seq)]
                )
            except ConflictError:
                # Something was appended after our intent (nothing should be while we
                # live): the result goes after it if our intent is still the open one.
                fold = await self._fold(begun.stream)
                if fold.intent is None or fold.intent.get("intent_id") != begun.intent_id:
                    raise GuardError(
                        f"effect {begun.tool!r} ran (intent {begun.intent_id!r}), but its "
                        "records changed meanwhile, so its outcome was not recorded: "
                        f"{canonical_json(payload)}"
                    ) from None
                if fold.result is not None:
                    return  # already settled (a decision recorded it)
                await self.journal.append(
                    self.namespace, [StreamWrite(begun.stream, [record], fold.head + 1)]
                )
        finally:
            LIVE_TOKENS.discard(begun.token)

    @staticmethod
    def abandon(begun: Begun) -> None:
        """Leave an effect without an outcome, as a crash does: its intent stays open.

        This process no longer runs it, so its owner reads as dead: the next
        execution finds it unknown (`NEVER`) or runs it again (`SAFE`), not busy.
        """
        LIVE_TOKENS.discard(begun.token)

    async def finish(self, begun: Begun, value: object = None) -> None:
        """Make the outcome of an effect that returned durable (its result record).

        A value with no JSON form is recorded as an error of an effect that happened
        (a `NEVER` effect is then never run again, and its replay raises), with one
        warning: the effect ran, so its intent must not stay open.
        """
        payload: dict[str, JSONValue] = {"intent_id": begun.intent_id, "status": "ok"}
        encoded = _encode(value)
        try:
            check_canonical(encoded)
            payload["value"] = cast(JSONValue, encoded)
        except ValueError as exc:
            _log.warning(
                "effect %r returned a value with no JSON form; recorded as happened "
                "with an error: %s",
                begun.tool,
                exc,
            )
            payload.update(
                status="error",
                error=f"the effect happened, but its value has no JSON form: {exc}",
            )
        await self._settle(begun, payload)

    async def fail(
        self,
        begun: Begun,
        exc: BaseException,
        not_happened_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        """Make the outcome of an effect that raised durable.

        Args:
            begun: The effect's intent.
            exc: What it raised.
            not_happened_on: Exception types that mean the effect did not act (a
                refused connection, a validation error before the request): such an
                exception is recorded as ``not_happened``, so a retry runs the effect
                under a new intent. Any other exception of a `NEVER` effect is
                recorded as ``raised``: the next execution asks whether it acted.
        """
        error = describe(exc)
        payload: dict[str, JSONValue] = {"intent_id": begun.intent_id}
        if not_happened_on and isinstance(exc, not_happened_on):
            payload.update(
                status="not_happened",
                resolved_by="guard",
                note=f"raised {error}, declared not to have happened",
            )
        elif begun.policy is ReplayPolicy.NEVER:
            payload.update(status="raised", error=error)
        else:
            payload.update(status="error", error=error)
        await self._settle(begun, payload)

    async def decide(self, unknown: Unknown, outcome: Happened | NotHappened) -> Recorded | None:
        """Record a caller's decision about an unknown effect.

        Returns:
            What the effect returned when it happened (the call returns that), or
            None when it did not (the call runs it under a new intent).

        Raises:
            EffectBusy: The effect's records changed since it was found unknown, or
                its owner is running it right now (a decision then could be wrong).
        """
        if unknown.call is not None:
            return await self._decide_call(unknown, outcome)
        stream = self.stream(unknown.key)
        fold = await self._fold(stream)
        owner = fold.open_owner()
        if owner is not None and owner.liveness() == "alive":
            raise EffectBusy(
                f"effect {unknown.tool!r} is still running in process {owner.pid} on "
                f"{owner.host!r}; decide once it has ended"
            )
        intent = fold.intent
        if intent is not None and intent["intent_id"] != unknown.intent_id:
            raise EffectBusy(f"effect {unknown.tool!r} changed while a decision was made")
        batch = []
        target = unknown.intent_id
        if unknown.reason == "arguments_changed":
            if isinstance(outcome, NotHappened):
                return None  # begin() then runs it under a new intent
            # Record this call as an effect of its own whose outcome the caller gave.
            attempt = int((intent or {}).get("attempt", 0)) + 1
            target = f"{stream}#{attempt}"
            batch.append(
                self.records(
                    INTENT_KIND,
                    {
                        "intent_id": target,
                        "policy": ReplayPolicy.NEVER.value,
                        "what": "tool",
                        "tool": unknown.tool,
                        "arguments": unknown.arguments,
                        "attempt": attempt,
                        "key": list(unknown.key),
                    },
                )
            )
        encoded = None if isinstance(outcome, NotHappened) else _encode(outcome.value)
        payload = decision_payload(target, outcome, cast(JSONValue, encoded))
        check_canonical(payload)
        batch.append(self.records(RESULT_KIND, payload))
        try:
            await self.journal.append(self.namespace, [StreamWrite(stream, batch, fold.head + 1)])
        except ConflictError:
            raise EffectBusy(f"effect {unknown.tool!r} changed while a decision was made") from None
        if isinstance(outcome, NotHappened):
            return None
        return Recorded(target, outcome.value, outcome.error)


def _intent_payload(  # noqa: PLR0917 - the intent's fields, each needed
    intent_id: str,
    policy: ReplayPolicy,
    tool: str,
    arguments: JSONValue,
    attempt: int,
    key: Sequence[str | int],
    token: str,
) -> dict[str, JSONValue]:
    """The payload of a tool intent, owned by this process under ``token``."""
    return {
        "intent_id": intent_id,
        "policy": policy.value,
        "what": "tool",
        "tool": tool,
        "arguments": arguments,
        "attempt": attempt,
        "key": list(key),
        "owner": Owner.me(token).to_json(),
    }
