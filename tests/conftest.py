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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep a chaos test's smoke cases in the default run.

    ``@pytest.mark.chaos(smoke=["sqlite"])`` puts a parametrised test's full volume under
    the ``chaos`` marker (``uv run pytest -m chaos``) except the cases named in ``smoke``:
    a case's id or one of its parameters' values (a fixture's too). Runs before ``-m``
    selects, so the default ``-m "not chaos"`` keeps those cases.
    """
    for item in items:
        mark = item.get_closest_marker("chaos")
        callspec = getattr(item, "callspec", None)
        if mark is None or callspec is None or not mark.kwargs.get("smoke"):
            continue
        names = {callspec.id, *(str(value) for value in callspec.params.values())}
        if names & set(mark.kwargs["smoke"]):
            item.own_markers[:] = [m for m in item.own_markers if m.name != "chaos"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once per missing server how many tests it skipped, instead of once per test."""
    counts: dict[str, tuple[int, str]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith("STEADYLOOP_"):
            variable = reason.split(":", 1)[0]
            count, _ = counts.get(variable, (0, reason))
            counts[variable] = (count + 1, reason)
    for _, (count, reason) in sorted(counts.items()):
        terminalreporter.write_line(f"{count} tests skipped, no server: {reason}")
