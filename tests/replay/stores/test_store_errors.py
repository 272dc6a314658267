"""A framework store that cannot be used exits 2 with one line that says why (issue 19)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from urllib.parse import quote, urlsplit

import pytest
from replay_helpers import replay_cli

from backends import require_server
from steadyloop.replay import bundled_cases

SINGLE = str(bundled_cases() / "single_turn.jsonl")
FRAMEWORKS = {
    "adk": "google.adk",
    "openai-agents": "agents",
    "trpc": "trpc_agent_sdk",
    "langgraph": "langgraph.checkpoint.postgres",
    "langgraph+async": "langgraph.checkpoint.postgres.aio",
    "langgraph-store": "langgraph.store.postgres",
}


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
async def test_a_missing_postgresql_schema_exits_2_naming_it(framework: str) -> None:
    """A search_path naming a schema that does not exist is one line and exit 2 on every framework."""
    pytest.importorskip(FRAMEWORKS[framework])
    server = await require_server("postgres")
    schema = f"sl_missing_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(server)
    options = "options=" + quote(f"-csearch_path={schema}", safe="")
    url = parts._replace(query=f"{parts.query}&{options}" if parts.query else options).geturl()
    out = replay_cli("run", SINGLE, "-b", f"{framework}+{url}")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    (line,) = _error_lines(out.stderr)
    assert f"the PostgreSQL schema {schema!r}" in line and "does not exist" in line
    assert f'CREATE SCHEMA "{schema}"' in line
    assert "Traceback" not in out.stderr


async def test_trpc_keeps_the_cause_of_an_unreachable_store() -> None:
    """The trpc store's "Failed to create database engine" line goes on to say why it failed."""
    pytest.importorskip("trpc_agent_sdk")
    server = await require_server("postgres")
    database = f"sl_absent_{uuid.uuid4().hex[:8]}"
    url = urlsplit(server)._replace(path=f"/{database}").geturl()
    out = replay_cli("run", SINGLE, "-b", f"trpc+{url}")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    (line,) = _error_lines(out.stderr)
    assert "Failed to create database engine" in line
    assert f'database "{database}" does not exist' in line


def test_trpc_without_greenlet_names_greenlet() -> None:
    """With greenlet missing, the line names greenlet, not trpc-agent-py, as not installed."""
    pytest.importorskip("trpc_agent_sdk")
    script = (
        "import runpy, sys\n"
        "sys.modules['greenlet'] = None\n"
        f"sys.argv = ['steadyloop', 'replay', 'run', {SINGLE!r}, '-b', 'trpc+sqlite']\n"
        "runpy.run_module('steadyloop', run_name='__main__')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert _error_lines(out.stderr) == [
        "error: store 'trpc+sqlite' needs greenlet, which is not installed: "
        "pip install 'steadyloop[trpc]'"
    ]
