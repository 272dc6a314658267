"""The declarative model of a task spec, and its errors as one `TaskSpecError`.

Each level of a spec's JSON form is one pydantic model (`_Task`, `_Goal`, `_Verify`)
declaring its fields, types and rules. [`TaskSpec`][steadyloop.audit.TaskSpec] and its
parts go through it when built in Python (`check`) and when read from JSON (`load`), so
the two ways in cannot disagree. Rules across tasks are
[`check_dependencies`][steadyloop.audit.check_dependencies]'s.

The model knows plain values only, never the spec classes: it takes a spec's fields as a
mapping (a part already built and checked is passed as `BUILT`) and gives back their
normal form, parts as mappings. `steadyloop.audit._tasks` builds the spec objects from
them and holds the defaults, so this module imports nothing of it.

A `ValidationError` never escapes: it becomes a `TaskSpecError` whose ``field`` is the
spec field (``goal.verify.env``) and whose message lists every problem at its exact
place (``goal.verify.command[1] must be a string without NUL, got 1``). This module,
and so pydantic, is imported when the first spec is checked, not by `steadyloop.audit`.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar

import pydantic as pd

from steadyloop import _names
from steadyloop._errors import EncodingError, TaskSpecError
from steadyloop.records import check_canonical

__all__ = ["BUILT", "check", "load"]

_AT = "{where}"  # a problem's place in a message; `_describe` puts it in


def _rule(problem: Callable[[Any], str | None]) -> pd.PlainValidator:
    """A field checked by a function saying what is wrong with a value (``None``: nothing)."""

    def validate(value: Any) -> Any:
        if (text := problem(value)) is None and isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                text = f"{_AT} is not valid Unicode: a lone surrogate at index {exc.start}"
        if text is not None:
            raise ValueError(text)
        return value

    return pd.PlainValidator(validate)


def _must(ok: Callable[[Any], object], what: str = "", say: str = "") -> pd.PlainValidator:
    """A field whose value must pass ``ok``; else "<place> must be <what>, got <value>"."""
    return _rule(lambda v: None if ok(v) else f"{say or f'{_AT} must be {what}'}, got {v!r:.80}")


def _given(kind: Any, what: str, empty: Any) -> pd.BeforeValidator:
    """Before a list or object field: ``None`` is empty; any other kind is refused."""

    def before(value: Any) -> Any:
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{_AT} must be {what}, got {value!r:.80}")
        return empty if value is None else value

    return pd.BeforeValidator(before)


def _json_form(value: dict[str, Any]) -> dict[str, Any]:
    try:
        check_canonical(value)
    except EncodingError as exc:
        raise ValueError(f"{_AT} has no JSON form: {exc}") from None
    return value


def _argv(value: Any) -> Any:
    """Before the verify command: a command line is split into words; a program comes first."""
    if value is None:
        raise ValueError("the verify spec needs a command")
    try:
        argv = shlex.split(value) if isinstance(value, str) else value
    except ValueError as exc:  # an unbalanced quote, a trailing backslash
        raise ValueError(f"the verify command line {value!r} cannot be split: {exc}") from None
    if not isinstance(argv, list | tuple) or not argv or not _filled(argv[0]):
        what = "a non-empty command line or argv list, program first"
        raise ValueError(f"{_AT} must be {what}, got {value!r:.80}")
    return argv


def _verify(value: Any) -> Any:
    """Before a goal's verify: the command alone (a line or a list) stands for the spec."""
    if value is None:
        raise ValueError("a goal-mode task needs a verify command")
    if isinstance(value, str | list | tuple):
        return {"command": value}
    return {} if isinstance(value, int | float) else value  # {}: its command is missing


class _Built:
    """The type of `BUILT`."""

    def __repr__(self) -> str:
        return "BUILT"


BUILT: Any = _Built()
"""Given for a part (a goal, a verify spec) that is a spec object already: it was checked
when it was built, so it is not checked again, and it comes back as `BUILT`."""


def _checked(value: Any, handler: pd.ValidatorFunctionWrapHandler) -> Any:
    """Around a part: one given as `BUILT` was checked when it was built."""
    return value if value is BUILT else handler(value)


def _text(v: Any, bad: str = "", empty: bool = True) -> bool:
    return isinstance(v, str) and (empty or v != "") and not any(c in v for c in bad)


def _filled(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _count(v: Any) -> bool:
    return type(v) is int and v >= 1


def _seconds(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v) and v > 0  # an int stays an int


def _int64(v: Any) -> bool:  # the queue keeps a priority in a signed 64-bit column
    return type(v) is int and -(2**63) <= v < 2**63


Arg = Annotated[str, _must(lambda v: _text(v, "\0"), "a string without NUL")]
Name = Annotated[str, _must(lambda v: _text(v, empty=False), "a non-empty name")]
VarName = Annotated[str, _must(lambda v: _text(v, "=\0", False), "a name without '=' or NUL")]
Path = Annotated[str, _must(lambda v: _text(v, "\0", False), "a non-empty path without NUL")]
Prompt = Annotated[str, _must(_filled, say="a task needs a prompt (missing or blank)")]
Goal = Annotated[str, _must(_filled, say="a goal-mode task needs a non-blank goal")]
TaskId = Annotated[str, _rule(lambda v: _names.task_id_problem(v, _AT))]
UserId = Annotated[str, _rule(lambda v: _names.id_problem(v, _AT))]
Count = Annotated[int, _must(_count, "a positive integer (at least 1)")]
Budget = Annotated[
    int, _must(_count, say="the round budget must be a positive integer (at least 1)")
]
Seconds = Annotated[float, _must(_seconds, "a positive, finite number of seconds")]
Priority = Annotated[int, _must(_int64, "an integer from -2**63 to 2**63 - 1")]
Metadata = Annotated[
    dict[str, Any], _given(Mapping, "an object", {}), pd.AfterValidator(_json_form)
]
_Required = pd.Field(None, validate_default=True)  # missing reads as None, refused by its rule
_Default: Any = None  # left out: not in the result, so the spec class's default applies


class _Model(pd.BaseModel):
    model_config = pd.ConfigDict(extra="forbid", frozen=True, from_attributes=True)
    kind: ClassVar[str]  # which spec it checks: "task", "goal" or "verify"
    place: ClassVar[tuple[str, ...]]  # where its fields are in a task spec's JSON form


class _Verify(_Model):
    kind, place = "verify", ("goal", "verify")
    command: Annotated[tuple[Arg, ...], pd.BeforeValidator(_argv)] = _Required
    timeout: Seconds = _Default
    env: Annotated[dict[VarName, Arg], _given(Mapping, "an object", {})] = _Default
    allow_env: Annotated[tuple[Name, ...], _given(list | tuple, "a list of names", ())] = _Default


class _Goal(_Model):
    kind, place = "goal", ("goal",)
    goal: Goal = _Required
    verify: Annotated[_Verify, pd.BeforeValidator(_verify), pd.WrapValidator(_checked)] = _Required
    round_budget: Budget = _Default


class _Task(_Model):
    kind, place = "task", ()
    prompt: Prompt = _Required
    task_id: TaskId | None = _Default
    priority: Priority = _Default
    depends_on: Annotated[tuple[TaskId, ...], _given(list | tuple, "a list of task ids", ())] = (
        _Default
    )
    idempotency_key: TaskId | None = _Default
    goal: Annotated[_Goal | None, pd.WrapValidator(_checked)] = _Default
    max_audit_rounds: Count = _Default
    workdir: Path | None = _Default
    user_id: UserId = _Default
    metadata: Metadata = _Default

    @pd.field_validator("depends_on")
    @classmethod
    def _no_repeats(cls, deps: tuple[str, ...], info: pd.ValidationInfo) -> tuple[str, ...]:
        if len(set(deps)) != len(deps):
            raise ValueError(f"{_AT} names a task twice")
        if (me := info.data.get("task_id")) in deps:
            raise ValueError(f"dependency cycle: {me} → {me} (a task cannot depend on itself)")
        return deps


_MODELS: dict[str, type[_Model]] = {m.kind: m for m in (_Task, _Goal, _Verify)}
_AT_PLACE = {m.place: m for m in _MODELS.values()}
_UNKNOWN = ("extra_forbidden", "invalid_key")
_DICT = "a valid dictionary or object to extract fields from"


def check(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Check the fields of a spec built in Python; return them in their normal form.

    Args:
        kind: ``"task"``, ``"goal"`` or ``"verify"``.
        fields: Every field of the spec; a part already built is given as `BUILT`.

    Returns:
        The fields in their normal form (tuples for lists, a command line split into
        words); a part given as `BUILT` stays `BUILT`, another part is a mapping of its
        fields given.

    Raises:
        TaskSpecError: A field breaks a rule; the error names it.
    """
    return _given_fields(_validate(_MODELS[kind], fields))


def load(kind: str, data: Any) -> dict[str, Any]:
    """Check the JSON form of a spec; return the fields it gives, in their normal form.

    Fields left out are not in the result (their default is the spec class's); a part
    is a mapping of its own fields, in the same way.

    Raises:
        TaskSpecError: A field is missing, unknown or breaks a rule; the error names it.
    """
    model = _MODELS[kind]
    return _given_fields(_validate(model, _verify(data) if model is _Verify else data))


def _validate(model: type[_Model], data: Any) -> _Model:
    try:
        return model.model_validate(data)
    except pd.ValidationError as exc:
        # An unknown field first: a misspelt name explains the missing one.
        errors = sorted(exc.errors(), key=lambda e: e["type"] not in _UNKNOWN)
        found = [_describe((*model.place, *e["loc"]), e) for e in errors]
        message = "; ".join(dict.fromkeys(text for _, text in found))
        raise TaskSpecError(message, field=found[0][0]) from None


def _given_fields(model: _Model) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in model.model_fields_set:
        value = getattr(model, name)
        out[name] = _given_fields(value) if isinstance(value, _Model) else value
    return out


def _describe(loc: tuple[Any, ...], error: Any) -> tuple[str, str]:
    """The spec field (dotted) a pydantic error is in, and its message naming its place."""
    n = 1  # the field is the parts of loc that name fields: through goal and verify
    while n < min(len(loc), 3) and loc[n - 1] in ("goal", "verify"):
        n += 1
    field, rest = ".".join(map(str, loc[:n])), loc[n:]
    if error["type"] in _UNKNOWN:
        known = ", ".join(sorted(_AT_PLACE[loc[: n - 1]].model_fields))
        where = ".".join(loc[: n - 1]) or "the task spec"
        return field, f"unknown field {str(loc[n - 1])!r} in {where}; known fields: {known}"
    where = field + "".join(f"[{p!r}]" for p in rest)
    if rest[-1:] == ("[key]",):
        where = f"the key {rest[-2]!r} of {field}"
    said = error["msg"].replace("Input should be", "must be").replace(_DICT, "an object")
    message = (
        str(error["ctx"]["error"])
        if error["type"] == "value_error"
        else f"{_AT} {said}, got {error['input']!r:.80}"
    )
    if not loc:  # the spec as a whole
        return "", message.replace(_AT, "a task spec").replace("an object", "a JSON object")
    return field, message.replace(_AT, where) if _AT in message else f"{where}: {message}"
