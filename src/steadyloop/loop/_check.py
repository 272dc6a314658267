"""Cross-checking a run against its session: the events that copy its results must agree.

Every effect's result is written twice, in one atomic batch: in the run stream (what
resume folds) and as a session event (what the model reads next). An edit, a bug or a
backend that loses one of them makes the two disagree, and a resumed run would then
act on a conversation that differs from what happened. ``journal doctor`` runs this
check on every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steadyloop._errors import SessionNotFound
from steadyloop.journal import Journal
from steadyloop.loop._messages import reply_events_parts
from steadyloop.loop._run import RunInfo
from steadyloop.records import INTENT_KIND, RESULT_KIND, JSONValue, canonical_json
from steadyloop.sessions import Event, SessionService, ToolResultPart

__all__ = ["Mismatch", "check_session_copies"]


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a run and its session disagree.

    Attributes:
        location: The run record: ``namespace/stream#seq``.
        detail: What differs.
    """

    location: str
    detail: str


def _short(value: JSONValue) -> str:
    text = canonical_json(value)
    return text if len(text) <= 80 else text[:79] + "…"


async def check_session_copies(journal: Journal, info: RunInfo) -> list[Mismatch]:
    """Compare each result of a run with the session event that copies it.

    A tool's result must match its ``tool_result`` event (value or error); a model
    reply must match the event recording it (text and tool calls). A result decided
    by a caller whose events the next driver has not written yet is not checked.

    Returns:
        One [Mismatch][steadyloop.loop.Mismatch] per disagreement (empty if none).
    """
    state = info.state
    where_run = f"{info.app}/{info.records[0].stream}"
    service = SessionService(journal, info.app)
    try:
        session = await service.get_session(state.user_id, state.session_id)
    except SessionNotFound:
        return [
            Mismatch(
                f"{where_run}#1",
                f"the run's session {state.session_id!r} of user {state.user_id!r} does not exist",
            )
        ]
    events: dict[str, Event] = {e.id: e for e in session.all_events}
    intents: dict[str, Mapping[str, Any]] = {}
    out: list[Mismatch] = []
    for r in info.records:
        iid = str(r.payload.get("intent_id"))
        if r.kind == INTENT_KIND:
            intents[iid] = r.payload
            continue
        if r.kind != RESULT_KIND or r.payload.get("status") not in ("ok", "error"):
            continue
        intent = intents.get(iid, {})
        problem = _compare(intent, r.payload, events, iid)
        if problem is not None:
            out.append(Mismatch(f"{where_run}#{r.seq}", problem))
    return out


def _compare(
    intent: Mapping[str, Any],
    result: Mapping[str, Any],
    events: Mapping[str, Event],
    iid: str,
) -> str | None:
    """Why ``result`` and its session copy disagree, or None if they agree."""
    caller = result.get("resolved_by") is not None
    if intent.get("what") == "model":
        if result.get("status") != "ok" or not isinstance(result.get("decision"), Mapping):
            return None
        event = events.get(f"{iid}:reply")
        if event is None:
            return None if caller else f"the session has no event {iid + ':reply'!r}"
        parts, _ = reply_events_parts(result.get("reply") or {}, result["decision"])
        want: list[JSONValue] = [p.to_dict() for p in parts]
        got: list[JSONValue] = [p.to_dict() for p in event.parts]
        if want != got:
            return (
                f"the reply of intent {iid!r} is {_short(want)} in the run but "
                f"{_short(got)} in session event {event.id!r}"
            )
        return None
    event = events.get(f"{iid}:result")
    if event is None:
        return None if caller else f"the session has no event {iid + ':result'!r}"
    part = next((p for p in event.parts if isinstance(p, ToolResultPart)), None)
    error = result.get("error") if result.get("status") == "error" else None
    value = None if error is not None else result.get("value")
    if part is None or (part.response, part.error) != (value, error):
        got_text = "nothing" if part is None else _short([part.response, part.error])
        return (
            f"the outcome of intent {iid!r} is {_short([value, error])} (value, error) in "
            f"the run but {got_text} in session event {event.id!r}"
        )
    return None
