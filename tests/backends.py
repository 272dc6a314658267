"""Which journal backends the tests run on, and how each test gets a private store.

Embedded backends (memory, jsonl, sqlite) always run. Server backends are added in
``SERVER_BACKENDS``; see ``server_url``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from steadyloop.journal import MemoryJournal

EMBEDDED_BACKENDS = ["memory", "jsonl", "sqlite"]
SERVER_BACKENDS: list[str] = []
ALL_BACKENDS = EMBEDDED_BACKENDS + SERVER_BACKENDS
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@asynccontextmanager
async def store_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """Yield a URL for a fresh, private store on ``backend``; remove it afterwards.

    Every ``open_journal`` of the URL reaches the same store, so tests can reopen.
    """
    if backend == "memory":
        name = f"test-{uuid.uuid4().hex}"
        try:
            yield f"memory://{name}"
        finally:
            MemoryJournal.forget(name)
    elif backend == "jsonl":
        directory = tmp_path / f"jsonl-{uuid.uuid4().hex[:8]}"
        directory.mkdir()
        yield f"jsonl://{directory}"
    elif backend == "sqlite":
        yield f"sqlite://{tmp_path}/journal-{uuid.uuid4().hex[:8]}.db"
    else:
        raise ValueError(f"unknown backend {backend!r}")
