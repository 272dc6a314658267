"""The public conformance suite, run on every backend."""

from __future__ import annotations

import pytest

from steadyloop.journal import open_journal
from steadyloop.testing import JournalConformance, JournalFactory


class TestConformance(JournalConformance):
    @pytest.fixture
    def journal_factory(self, backend: str, journal_url: str) -> JournalFactory:
        shared = None if backend == "memory" else journal_url
        return JournalFactory(open=lambda: open_journal(journal_url), url=shared)
