"""Fixtures for replay tests."""

from __future__ import annotations

import pytest

from steadyloop.replay import Case, bundled_cases, load_cases


@pytest.fixture(scope="session")
def suite() -> list[Case]:
    """The bundled case suite, loaded once."""
    return load_cases([bundled_cases()])


@pytest.fixture(scope="session")
def cases_by_id(suite: list[Case]) -> dict[str, Case]:
    """The bundled cases by id."""
    return {c.case_id: c for c in suite}
