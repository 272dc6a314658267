"""Opening journals by URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from steadyloop import BackendUnavailable, UnknownBackend
from steadyloop.journal import JSONLJournal, MemoryJournal, SQLiteJournal, open_journal, redact_url


async def test_each_embedded_scheme_opens_its_backend(tmp_path: Path) -> None:
    """memory, jsonl and sqlite URLs open the matching backend class."""
    async with await open_journal("memory://") as j:
        assert isinstance(j, MemoryJournal)
    async with await open_journal(f"jsonl://{tmp_path}") as j:
        assert isinstance(j, JSONLJournal)
    async with await open_journal(f"sqlite://{tmp_path}/a.db") as j:
        assert isinstance(j, SQLiteJournal)
        assert j.path == f"{tmp_path}/a.db"


async def test_relative_sqlite_path_and_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:relative.db and the default URL create files in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STEADYLOOP_JOURNAL", raising=False)
    async with await open_journal("sqlite:rel.db"):
        pass
    async with await open_journal() as j:
        assert isinstance(j, SQLiteJournal)
    assert (tmp_path / "rel.db").exists() and (tmp_path / "steadyloop.db").exists()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://host/x", "unknown journal scheme 'ftp'"),
        ("nonsense", "is not a journal URL"),
        ("jsonl://somehost/dir", "takes a path, not a host"),
        ("sqlite:", "names no path"),
    ],
)
async def test_bad_urls_get_clear_errors(url: str, message: str) -> None:
    """A malformed or unknown URL raises UnknownBackend saying what is wrong."""
    with pytest.raises(UnknownBackend, match=message):
        await open_journal(url)


def test_passwords_are_redacted() -> None:
    """A URL's password never appears in what we print."""
    assert redact_url("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    assert redact_url("sqlite:x.db") == "sqlite:x.db"


def test_server_drivers_are_imported_only_when_used() -> None:
    """Importing steadyloop and opening an embedded journal loads no server driver."""
    code = (
        "import asyncio, sys, steadyloop, steadyloop.journal, steadyloop.cli\n"
        "asyncio.run(steadyloop.open_journal('memory://'))\n"
        "print(sorted(m for m in ('psycopg', 'redis', 'asyncmy', 'psycopg_pool') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_sqlite_weakened_durability_is_explicit(tmp_path: Path) -> None:
    """SQLite runs at synchronous=FULL unless the URL asks otherwise, by name."""
    async with await open_journal(f"sqlite://{tmp_path}/a.db") as j:
        assert isinstance(j, SQLiteJournal) and j.synchronous == "FULL"
    async with await open_journal(f"sqlite://{tmp_path}/b.db?synchronous=normal") as j:
        assert isinstance(j, SQLiteJournal) and j.synchronous == "NORMAL"


def test_installed_packages_add_schemes_through_entry_points(tmp_path: Path) -> None:
    """A scheme registered in the steadyloop.journals entry-point group opens in any process."""
    (tmp_path / "plugjournal.py").write_text(
        "from steadyloop.journal import MemoryJournal\n"
        "class PlugJournal(MemoryJournal):\n"
        "    @classmethod\n"
        "    async def open(cls, url, **options):\n"
        "        journal = cls(url.split('://', 1)[1])\n"
        "        journal.url = url\n"
        "        return journal\n"
    )
    dist = tmp_path / "plugjournal-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugjournal\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[steadyloop.journals]\nplug = plugjournal:PlugJournal\nbroken = plugjournal:Missing\n"
    )
    code = (
        "import asyncio\n"
        "from steadyloop import UnknownBackend, open_journal\n"
        "async def main():\n"
        "    j = await open_journal('plug://shared')\n"
        "    print(type(j).__name__, j.url)\n"
        "    try:\n"
        "        await open_journal('broken://x')\n"
        "    except UnknownBackend as exc:\n"
        "        print('broken:', exc)\n"
        "    try:\n"
        "        await open_journal('nope://x')\n"
        "    except UnknownBackend as exc:\n"
        "        print('nope:', exc)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "PlugJournal plug://shared"
    assert "does not load" in lines[1] and "plugjournal:Missing" in lines[1]
    assert "known schemes:" in lines[2] and "plug" in lines[2]


async def test_create_false_refuses_a_missing_sqlite_file(tmp_path: Path) -> None:
    """open_journal(create=False) raises BackendUnavailable for a missing file and opens an existing one."""
    url = f"sqlite://{tmp_path}/j.db"
    with pytest.raises(BackendUnavailable, match="no journal here"):
        await open_journal(url, create=False)
    assert not (tmp_path / "j.db").exists()
    await (await open_journal(url)).close()
    await (await open_journal(url, create=False)).close()
