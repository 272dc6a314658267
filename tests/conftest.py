"""Shared fixtures: every backend-parametrised test gets a private store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backends import ALL_BACKENDS, store_url


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the journal backend under test."""
    return str(request.param)


@pytest.fixture
async def journal_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A URL of a fresh, private store on the backend under test."""
    async with store_url(backend, tmp_path) as url:
        yield url
