"""The checkpointer domain of the case language: what a graph asks of its checkpoint saver.

A case may drive a *checkpoint saver* (LangGraph's `BaseCheckpointSaver`: a thread's
checkpoints, each with its channel values and versions and the pending writes of the
tasks that ran from it) with these operations; a store without the
[`CHECKPOINTER`][steadyloop.replay.Capability] capability does not run such a case (it
is `not_applicable` there and counts as not compared):

``saver_put`` (``thread``, ``checkpoint``, optional ``thread_id``, ``ns``, ``parent``,
``checkpoint_id``, ``values``, ``versions``, ``metadata``)
    Save a checkpoint, as a graph saves one per super-step. ``checkpoint`` is the case's
    handle for it (unique in the case); ``thread`` the handle of its thread, whose id
    (``thread_id``, by default the handle) the thread's first ``saver_put`` fixes.
    ``ns`` is the checkpoint namespace (``""``, the root graph, by default; a subgraph's
    is ``"parent:<task>"``, nested ``"parent:<task>|child:<task>"``). ``parent`` is the
    handle of the checkpoint it follows (by default the last one put in the same thread
    and namespace; ``null``: none). ``values`` are the channels this step wrote: the
    checkpoint holds the parent's channels with these replaced, and ``new_versions``
    names exactly these, each at the saver's own next version (``versions`` gives a
    channel's version instead). ``metadata`` is added to ``{"source": "loop", "step":
    N}`` (N counts the thread and namespace's puts from 0). ``checkpoint_id`` defaults
    to a rising id the harness makes (the same on every store).
``saver_put_writes`` (``checkpoint``, ``task_id``, ``writes``, optional ``task_path``)
    Save a task's pending writes against a checkpoint: ``writes`` is a list of
    ``{"channel", "value"}``; the channels ``__error__`` and ``__interrupt__`` are
    LangGraph's special ERROR and INTERRUPT writes.
``saver_get`` (``read``, ``thread``, optional ``ns``, ``checkpoint``)
    ``get_tuple``: the checkpoint ``checkpoint`` names (by its id, in this thread and
    namespace), or the latest one; the result goes to
    ``/threads/<thread>/reads/<read>``.
``saver_list`` (``read``, ``thread``, optional ``ns``, ``filter``, ``before``, ``limit``)
    ``list``: the thread's checkpoints in the saver's order (``ns`` omitted or ``null``:
    every namespace), matching the metadata ``filter``, older than the checkpoint
    ``before`` names, at most ``limit``; the result goes to
    ``/threads/<thread>/reads/<read>``.
``saver_delete_thread`` (``thread``)
    ``delete_thread``: every checkpoint and write of the thread, in every namespace.

After the last operation the harness restarts the store and reads back every thread in
every namespace the case used: ``/threads/<thread>/namespaces/<ns>`` holds ``latest``
(the tuple ``get_tuple`` gives without an id) and ``history`` (what ``list`` gives), each
checkpoint with its values, versions, metadata, parent and pending writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

__all__ = [
    "SAVER_OPS",
    "SaverChecker",
    "SaverDeleteThread",
    "SaverGet",
    "SaverList",
    "SaverOp",
    "SaverProblem",
    "SaverPut",
    "SaverPutWrites",
    "WriteSpec",
]


def _integral(value: object) -> object:
    if type(value) is float and value.is_integer():
        return int(value)
    return value


NonEmpty = Annotated[str, Field(min_length=1)]
Handle = Annotated[str, Field(min_length=1, max_length=200)]
Count = Annotated[int, BeforeValidator(_integral), Field(ge=0, le=10_000)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    note: str | None = Field(default=None, description="Free text for the reader; ignored.")


class SaverPut(_Model):
    """Save a checkpoint in a thread and namespace (a graph's super-step)."""

    op: Literal["saver_put"]
    thread: Handle
    checkpoint: Handle = Field(description="The case's handle for this checkpoint; unique.")
    thread_id: NonEmpty | None = Field(
        default=None, description="The thread's id (default: the handle); its first put fixes it."
    )
    ns: str = Field(default="", description="The checkpoint namespace ('' is the root graph).")
    parent: Handle | None = Field(
        default="",
        description="The checkpoint this one follows (default: the last put in this thread "
        "and namespace; null: none).",
    )
    checkpoint_id: NonEmpty | None = Field(
        default=None, description="The checkpoint's id (default: a rising id of the harness)."
    )
    values: dict[str, Any] = Field(
        default_factory=dict, description="The channels this step wrote, with their values."
    )
    versions: dict[str, int | float | str] = Field(
        default_factory=dict,
        description="A version for some written channels, instead of the saver's next one.",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)


class WriteSpec(_Model):
    """One pending write: a channel and its value."""

    channel: NonEmpty
    value: Any = None


class SaverPutWrites(_Model):
    """Save a task's pending writes against a checkpoint."""

    op: Literal["saver_put_writes"]
    checkpoint: Handle
    task_id: NonEmpty
    task_path: str = ""
    writes: Annotated[list[WriteSpec], Field(min_length=1)]


class SaverGet(_Model):
    """Read one checkpoint tuple: by id, or the latest."""

    op: Literal["saver_get"]
    read: Handle = Field(description="Where the result goes: /threads/<thread>/reads/<read>.")
    thread: Handle
    ns: str = ""
    checkpoint: Handle | None = Field(
        default=None, description="Read this checkpoint's id (default: the latest)."
    )


class SaverList(_Model):
    """List a thread's checkpoint tuples."""

    op: Literal["saver_list"]
    read: Handle = Field(description="Where the result goes: /threads/<thread>/reads/<read>.")
    thread: Handle
    ns: str | None = Field(default=None, description="One namespace (default: every one).")
    filter: dict[str, Any] = Field(default_factory=dict, description="A metadata filter.")
    before: Handle | None = Field(default=None, description="Only checkpoints older than this.")
    limit: Count | None = None


class SaverDeleteThread(_Model):
    """Delete a thread: every checkpoint and write, in every namespace."""

    op: Literal["saver_delete_thread"]
    thread: Handle


SaverOp: TypeAlias = SaverPut | SaverPutWrites | SaverGet | SaverList | SaverDeleteThread
"""An operation of the checkpointer domain."""

SAVER_OPS: dict[str, type[BaseModel]] = {
    "saver_put": SaverPut,
    "saver_put_writes": SaverPutWrites,
    "saver_get": SaverGet,
    "saver_list": SaverList,
    "saver_delete_thread": SaverDeleteThread,
}
"""The checkpointer domain's ops, by name."""


class SaverProblem(Exception):
    """A cross-record problem: the field (a JSON Pointer into the record) and what is wrong."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field
        self.detail = detail


@dataclass
class SaverChecker:
    """Cross-record checks of the checkpointer ops: handles defined before use, unique."""

    threads: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, tuple[str, str]] = field(default_factory=dict)
    reads: set[str] = field(default_factory=set)

    def _thread(self, handle: str) -> None:
        if handle not in self.threads:
            raise SaverProblem("/thread", f"thread {handle!r} is used before its first saver_put")

    def _checkpoint(self, handle: str, where: str) -> tuple[str, str]:
        found = self.checkpoints.get(handle)
        if found is None:
            raise SaverProblem(where, f"checkpoint {handle!r} is used before its saver_put")
        return found

    def check(self, op: BaseModel) -> list[tuple[str, Any]]:
        """Check one op; return the JSON values in it, each with its field, to check too."""
        if isinstance(op, SaverPut):
            tid = op.thread_id or op.thread
            known = self.threads.setdefault(op.thread, tid)
            if op.thread_id is not None and known != op.thread_id:
                raise SaverProblem(
                    "/thread_id", f"thread {op.thread!r} already has the id {known!r}"
                )
            if op.checkpoint in self.checkpoints:
                raise SaverProblem("/checkpoint", f"checkpoint {op.checkpoint!r} is already put")
            if op.parent:
                self._checkpoint(op.parent, "/parent")
            for channel in op.versions:
                if channel not in op.values:
                    raise SaverProblem(
                        f"/versions/{channel}", "a version is given only for a channel written"
                    )
            self.checkpoints[op.checkpoint] = (op.thread, op.ns)
            return [("/values", op.values), ("/metadata", op.metadata)]
        if isinstance(op, SaverPutWrites):
            self._checkpoint(op.checkpoint, "/checkpoint")
            return [(f"/writes/{i}/value", w.value) for i, w in enumerate(op.writes)]
        if isinstance(op, SaverGet | SaverList):
            self._thread(op.thread)
            if op.read in self.reads:
                raise SaverProblem("/read", f"read {op.read!r} is already used")
            self.reads.add(op.read)
            if isinstance(op, SaverGet) and op.checkpoint is not None:
                self._checkpoint(op.checkpoint, "/checkpoint")
            if isinstance(op, SaverList):
                if op.before is not None:
                    self._checkpoint(op.before, "/before")
                return [("/filter", op.filter)]
            return []
        if isinstance(op, SaverDeleteThread):
            self._thread(op.thread)
        return []
