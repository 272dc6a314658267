"""The declarative model of a task spec, and its errors as one `TaskSpecError`.

Every rule a single task spec follows is declared here, once, as one pydantic model
per level of the spec's JSON form (`_Task`, `_Goal`, `_Verify`): the fields, their
types, defaults and checks. [`TaskSpec`][steadyloop.audit.TaskSpec] and its parts
validate through these models both when built in Python (`check`) and when read from
JSON (`load`), so the two ways in cannot disagree. Rules across tasks (unknown
dependencies, cycles) are [`check_dependencies`][steadyloop.audit.check_dependencies]'s.

A `ValidationError` never escapes: it becomes one `TaskSpecError` whose ``field`` is
the spec field in dotted form (``goal.verify.env``) and whose message names each
problem's exact place, list indices and keys included
(``goal.verify.command[1] must be a string, got 1``).

This module imports pydantic; `steadyloop.audit._tasks` imports it when the first
spec is validated, not when `steadyloop.audit` is imported.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import ErrorDetails

from steadyloop import _names
from steadyloop._errors import EncodingError, TaskSpecError
from steadyloop.audit._tasks import (
    DEFAULT_AUDIT_ROUNDS,
    DEFAULT_ROUND_BUDGET,
    GoalSpec,
    TaskSpec,
    VerifySpec,
)
from steadyloop.records import check_canonical

__all__ = ["check", "load"]

_T = TypeVar("_T")
_AT = "{where}"  # the problem's place in a message; `_describe` puts it in


def _got(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text)} characters)"


def _rule(problem: Callable[[Any], str | None]) -> PlainValidator:
    """A validator from a function saying what is wrong with a value (``None``: nothing)."""

    def validate(value: Any) -> Any:
        if (text := problem(value)) is not None:
            raise ValueError(text)
        return value

    return PlainValidator(validate)


_CHARS = {"\0": "NUL", "=": "'='"}


def _text(v: Any, blank: str = "", bad: str = "") -> str | None:
    """What is wrong with a text: not a string, blank, holding a ``bad`` char, not Unicode."""
    if not isinstance(v, str) or (blank and not v.strip()):
        return blank or f"{_AT} must be a string, got {_got(v)}"
    if any(c in v for c in bad):
        return f"{_AT} must hold no {' or '.join(_CHARS.get(c, c) for c in bad)}, got {_got(v)}"
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"{_AT} is not valid Unicode: a lone surrogate at index {exc.start}"
    return None


def _filled(what: str, bad: str = "") -> PlainValidator:
    """A text that is not empty (it may be all spaces) and holds no ``bad`` char."""
    return _rule(lambda v: _text(v, bad=bad) if v != "" else f"{_AT} must be {what}, got ''")


def _positive(what: str) -> PlainValidator:
    return _rule(
        lambda v: (
            None
            if type(v) is int and v >= 1
            else f"{what} must be a positive integer (at least 1), got {_got(v)}"
        )
    )


def _seconds(v: Any) -> str | None:
    if type(v) in (int, float) and math.isfinite(v) and v > 0:
        return None  # an int stays one: the stored form, and so the digest, keeps it
    return f"{_AT} must be a positive, finite number of seconds, got {_got(v)}"


def _given(kind: type | tuple[type, ...], what: str, empty: Any) -> BeforeValidator:
    """Before a list or object field: ``None`` is empty; any other kind is refused."""

    def before(value: Any) -> Any:
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{_AT} must be {what}, got {_got(value)}")
        return empty if value is None else value

    return BeforeValidator(before)


def _json_object(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{_AT} must be an object, got {_got(value)}")
    try:
        check_canonical(value)
    except EncodingError as exc:
        raise ValueError(f"{_AT} has no JSON form: {exc}") from None
    return dict(value)


def _argv(value: Any) -> Any:
    """Before the verify command: a command line is split into words; a program comes first."""
    if value is None:
        raise ValueError("the verify spec needs a command")
    argv = value
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:  # an unbalanced quote, a trailing backslash
            raise ValueError(f"the verify command line {value!r} cannot be split: {exc}") from None
    if not isinstance(argv, list | tuple) or not argv:
        raise ValueError(f"{_AT} must be a non-empty argv list or command line, got {_got(value)}")
    if not isinstance(argv[0], str) or not argv[0].strip():
        raise ValueError(f"{_AT} must name a program first, got {_got(value)}")
    return argv


def _verify(value: Any) -> Any:
    """Before a goal's verify: the command alone (a line or a list) stands for the spec."""
    if value is None:
        raise ValueError("a goal-mode task needs a verify command")
    if isinstance(value, str | list | tuple):
        return {"command": value}
    return {} if isinstance(value, int | float) else value  # {}: its command is missing


def _checked(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Around a part of a spec: a `GoalSpec` or `VerifySpec` object was checked when built."""
    return value if type(value) in _MODELS else handler(value)


Text = Annotated[str, _rule(_text)]
Arg = Annotated[str, _rule(lambda v: _text(v, bad="\0"))]
TaskId = Annotated[str, _rule(lambda v: _names.task_id_problem(v, _AT))]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, from_attributes=True)
    spec: ClassVar[type]  # the spec class it checks
    place: ClassVar[tuple[str, ...]]  # where its fields are in a task spec's JSON form


class _Verify(_Model):
    spec, place = VerifySpec, ("goal", "verify")
    command: Annotated[tuple[Arg, ...], BeforeValidator(_argv)] = Field(None, validate_default=True)
    timeout: Annotated[float, _rule(_seconds)] = 60.0
    env: Annotated[
        dict[Annotated[str, _filled("a non-empty variable name", bad="=\0")], Arg],
        _given(Mapping, "an object", {}),
    ] = {}
    allow_env: Annotated[
        tuple[Annotated[str, _filled("a non-empty variable name")], ...],
        _given(list | tuple, "a list of names", ()),
    ] = ()


class _Goal(_Model):
    spec, place = GoalSpec, ("goal",)
    goal: Annotated[str, _rule(lambda v: _text(v, "a goal-mode task needs a non-blank goal"))] = (
        Field(None, validate_default=True)
    )
    verify: Annotated[_Verify, BeforeValidator(_verify), WrapValidator(_checked)] = Field(
        None, validate_default=True
    )
    round_budget: Annotated[int, _positive("the round budget")] = DEFAULT_ROUND_BUDGET


class _Task(_Model):
    spec, place = TaskSpec, ()
    prompt: Annotated[
        str, _rule(lambda v: _text(v, "a task needs a prompt (it is missing or blank)"))
    ] = Field(None, validate_default=True)
    task_id: TaskId | None = None
    priority: Annotated[int, Strict(), Field(ge=-(2**63), le=2**63 - 1)] = (
        0  # a signed 64-bit column
    )
    depends_on: Annotated[tuple[TaskId, ...], _given(list | tuple, "a list of task ids", ())] = ()
    idempotency_key: TaskId | None = None
    goal: Annotated[_Goal | None, WrapValidator(_checked)] = None
    max_audit_rounds: Annotated[int, _positive(_AT)] = DEFAULT_AUDIT_ROUNDS
    workdir: Annotated[str, _filled("a non-empty path", bad="\0")] | None = None
    user_id: Annotated[str, _rule(lambda v: _names.id_problem(v, _AT))] = "audit"
    metadata: Annotated[dict[str, Any], PlainValidator(_json_object)] = {}

    @field_validator("depends_on")
    @classmethod
    def _no_repeats(cls, deps: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if len(set(deps)) != len(deps):
            raise ValueError(f"{_AT} names a task twice")
        if (me := info.data.get("task_id")) in deps:
            raise ValueError(f"dependency cycle: {me} → {me} (a task cannot depend on itself)")
        return deps


_MODELS: dict[type, type[_Model]] = {m.spec: m for m in (_Task, _Goal, _Verify)}
_CHILD: dict[tuple[type[_Model], str], type[_Model]] = {
    (_Task, "goal"): _Goal,
    (_Goal, "verify"): _Verify,
}


def check(spec: TaskSpec | GoalSpec | VerifySpec) -> None:
    """Validate a spec object built in Python, in place: its fields get their normal form.

    Raises:
        TaskSpecError: A field breaks a rule; the error names it.
    """
    _assign(spec, _validate(_MODELS[type(spec)], spec))


def load(cls: type[_T], data: Any) -> _T:
    """Build a `TaskSpec`, `GoalSpec` or `VerifySpec` from its JSON form.

    Raises:
        TaskSpecError: A field is missing, unknown or breaks a rule; the error names it.
    """
    model = _MODELS[cls]
    return _build(_validate(model, _verify(data) if model is _Verify else data))  # type: ignore[no-any-return]


def _validate(model: type[_Model], data: Any) -> _Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # An unknown field first: a misspelt name explains the missing one.
        errors.sort(key=lambda e: e["type"] not in ("extra_forbidden", "invalid_key"))
        found = [_describe(e, model.place) for e in errors]
        message = "; ".join(dict.fromkeys(text for _, text in found))
        raise TaskSpecError(message, field=found[0][0]) from None


def _build(model: _Model) -> Any:
    """The spec object of a validated model, built without checking it again."""
    spec: object = object.__new__(model.spec)
    _assign(spec, model)
    return spec


def _assign(spec: object, model: _Model) -> None:
    for name in type(model).model_fields:
        value = getattr(model, name)
        object.__setattr__(spec, name, _build(value) if isinstance(value, _Model) else value)


_PHRASES = {  # pydantic's own errors, as the rest of a sentence that begins with the place
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "dict_type": "must be an object",
    "model_attributes_type": "must be an object",
    "tuple_type": "must be a list",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
}


def _describe(error: ErrorDetails, place: tuple[str, ...]) -> tuple[str, str]:
    """The spec field (dotted) one pydantic error is in, and its message naming the place."""
    model: type[_Model] | None = _Task
    field: list[str] = []
    where = ""
    loc = (*place, *error["loc"])
    for i, part in enumerate(loc):
        if model is not None and part not in model.model_fields:
            known = ", ".join(sorted(model.model_fields))
            return ".".join([*field, str(part)]), (
                f"unknown field {str(part)!r} in {'.'.join(field) or 'the task spec'}; "
                f"known fields: {known}"
            )
        if model is not None:
            field.append(str(part))
            where, model = ".".join(field), _CHILD.get((model, str(part)))
        elif part == "[key]":
            where = f"the key {loc[i - 1]!r} of {'.'.join(field)}"
        else:
            where += f"[{part}]" if isinstance(part, int) else f"[{part!r}]"
    if error["type"] == "value_error":
        message = str((error.get("ctx") or {}).get("error", error["msg"]))
    elif error["type"] in _PHRASES:
        phrase = _PHRASES[error["type"]].format(**(error.get("ctx") or {}))
        message = f"{_AT} {phrase}, got {_got(error['input'])}"
    else:
        message = f"{_AT}: {error['msg'][:1].lower()}{error['msg'][1:]}"
    if not where:  # the spec as a whole
        return "", message.replace(f"{_AT} must be an object", "a task spec must be a JSON object")
    # every message names its place: in the sentence, or before it
    return ".".join(field), message.replace(_AT, where) if _AT in message else f"{where}: {message}"
