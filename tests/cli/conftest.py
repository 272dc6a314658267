"""CLI test fixtures."""

from __future__ import annotations

import pytest

from steadyloop.cli import _common


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Print tables wide enough that paths are not folded across lines."""
    monkeypatch.setattr(_common.console, "width", 300)
    monkeypatch.setattr(_common.err_console, "width", 300)
