"""What an effect's records can say: its policy, its statuses, and a caller's decision."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from steadyloop._errors import GuardError
from steadyloop.records import JSONValue

__all__ = [
    "DONE_STATUSES",
    "REDO_STATUSES",
    "Happened",
    "NotHappened",
    "ReplayPolicy",
    "decision_from",
    "decision_payload",
    "interrupted",
]

DONE_STATUSES = frozenset({"ok", "error"})
"""Result statuses saying the effect happened."""

REDO_STATUSES = frozenset({"interrupted", "not_happened"})
"""Result statuses saying the effect must be done again, under a new intent."""


class ReplayPolicy(enum.StrEnum):
    """What resume may do with an effect whose intent is durable but whose result is not.

    Attributes:
        SAFE: Repeating the effect is harmless (a read, a pure computation, a model
            call): resume executes it again.
        NEVER: The effect must never happen twice (a payment, an e-mail): resume stops
            with [`StopReason.RESUME_STATE_UNKNOWN`][steadyloop.loop.StopReason] and the caller
            decides.
    """

    SAFE = "safe"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Happened:
    """A caller's decision: the effect happened, with this outcome.

    Attributes:
        value: For a tool, its observation (any JSON value). For a model call, the reply
            as [`ModelReply.to_json`][steadyloop.loop.ModelReply.to_json] gives it.
        error: For a tool that failed: the error the model should see.
        note: Why the caller decided so (stored with the decision).
    """

    value: JSONValue = None
    error: str | None = None
    note: str = ""


@dataclass(frozen=True, slots=True)
class NotHappened:
    """A caller's decision: the effect did not happen; resume does it again.

    Attributes:
        note: Why the caller decided so (stored with the decision).
    """

    note: str = ""


def decision_from(value: object) -> Happened | NotHappened:
    """Read a caller's decision given through a runtime's resume mechanism.

    Args:
        value: [Happened][steadyloop.effects.Happened] or
            [NotHappened][steadyloop.effects.NotHappened], or their JSON form:
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


def interrupted(intent_id: str) -> dict[str, JSONValue]:
    """The result closing an intent whose effect runs again (``status: interrupted``)."""
    return {"intent_id": intent_id, "status": "interrupted"}


def decision_payload(
    intent_id: str,
    outcome: Happened | NotHappened,
    value: JSONValue = None,
    *,
    field: str = "value",
) -> dict[str, JSONValue]:
    """The result a caller's decision writes for an intent (``resolved_by: caller``).

    Args:
        intent_id: The intent decided.
        outcome: The decision.
        value: The value to record for a decision that the effect happened without
            an error (the outcome's own value, encoded as the record holds it).
        field: Where that value goes: ``value`` for a tool, ``reply`` for a model call.
    """
    payload: dict[str, JSONValue] = {
        "intent_id": intent_id,
        "resolved_by": "caller",
        "note": outcome.note,
    }
    if isinstance(outcome, NotHappened):
        payload["status"] = "not_happened"
    elif outcome.error is not None:
        payload.update(status="error", error=outcome.error)
    else:
        payload.update({"status": "ok", field: value})
    return payload
