"""What the adapters share: how a failure is told in one line, and the PostgreSQL schema check."""

from __future__ import annotations

from typing import Any

from steadyloop._errors import BackendUnavailable
from steadyloop.replay._store import without_passwords

__all__ = ["describe", "require_postgres_schema"]


def _first_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return (text.splitlines() or [type(exc).__name__])[0]


def describe(exc: BaseException) -> str:
    """One line for `exc` and what caused it, with no URL's password.

    A framework that wraps a driver's error ("Failed to create database engine") keeps
    the reason in `__cause__` or `__context__`: each distinct link of that chain is
    named, innermost last, so the line says why.

    Examples:
        >>> try:
        ...     try:
        ...         raise OSError("connection refused")
        ...     except OSError as inner:
        ...         raise ValueError("Failed to create database engine") from inner
        ... except ValueError as exc:
        ...     describe(exc)
        'ValueError: Failed to create database engine (caused by OSError: connection refused)'
    """
    parts: list[str] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(parts) < 4:
        seen.add(id(link))
        message = (str(link).strip().splitlines() or [""])[0]
        if not parts or message not in parts[-1]:
            parts.append(_first_line(link))
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    head, *causes = parts
    text = head + "".join(f" (caused by {cause})" for cause in causes)
    return without_passwords(text)


async def require_postgres_schema(engine: Any, store: str) -> None:
    """Refuse a PostgreSQL store whose `search_path` names no schema that exists.

    Without this each framework fails in its own way on the first table it creates
    (a traceback, differences on every operation, a vague line). `engine` is a
    SQLAlchemy async engine; on other databases this does nothing.

    Raises:
        BackendUnavailable: No schema of the connection's `search_path` exists; the
            message names it and how to create it.
    """
    from sqlalchemy import text

    if engine.dialect.name != "postgresql":
        return
    async with engine.connect() as conn:
        current = (await conn.execute(text("SELECT current_schema()"))).scalar()
        if current is not None:
            return
        path = str((await conn.execute(text("SHOW search_path"))).scalar() or "")
    names = [p.strip().strip('"') for p in path.split(",") if p.strip()]
    name = next((n for n in names if n != "$user"), path)
    raise BackendUnavailable(
        f"store {store!r}: the PostgreSQL schema {name!r} (its search_path: {path}) "
        f'does not exist; create it first: CREATE SCHEMA "{name}"'
    )
