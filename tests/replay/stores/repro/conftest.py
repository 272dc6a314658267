"""Fixtures for the minimal reproductions: each framework service on a private store.

Everything here is plain framework code (no Steadyloop): these tests pin what google-adk
and openai-agents do at the versions `pyproject.toml` pins, so a fix upstream shows up
as a failing test here (and the divergence list in the replay docs gets shorter).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from framework_dbs import (
    mysql_database,
    postgres_schema,
    sqlalchemy_mysql_url,
    sqlalchemy_postgres_url,
)


@pytest.fixture
async def adk_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Return `make(backend)`: a new ADK session service on a private store of `backend`.

    Calling it again with the same backend gives a *fresh client of the same store* (a
    restart); the in-memory service is returned as it is, since it has nowhere else to
    live.
    """
    from contextlib import AsyncExitStack

    from google.adk.sessions import DatabaseSessionService, InMemorySessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    stack = AsyncExitStack()
    urls: dict[str, str] = {}
    services: list[Any] = []
    memory = InMemorySessionService()

    async def make(backend: str) -> Any:
        if backend == "memory":
            return memory
        if backend == "sqlite":
            service: Any = SqliteSessionService(str(tmp_path / "adk-native.db"))
        else:
            if backend not in urls:
                if backend == "database+sqlite":
                    urls[backend] = f"sqlite+aiosqlite:///{tmp_path / 'adk-database.db'}"
                elif backend == "postgresql":
                    server, schema = await stack.enter_async_context(postgres_schema())
                    urls[backend] = sqlalchemy_postgres_url(server, schema)
                elif backend == "mysql":
                    db_url, _ = await stack.enter_async_context(mysql_database())
                    urls[backend] = sqlalchemy_mysql_url(db_url)
                else:
                    raise ValueError(backend)
            service = DatabaseSessionService(urls[backend])
        services.append(service)
        return service

    async with stack:
        try:
            yield make
        finally:
            for service in services:
                await service.close()
