"""`runs list` shows a page at a time, and a page reads only the runs it shows."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from steadyloop.cli import app
from steadyloop.journal import open_journal
from steadyloop.loop import list_runs, run_keys, run_stream

runner = CliRunner()
RUN_IDS = [f"r{i:02d}" for i in range(7)]


@pytest.fixture
def journal_url(tmp_path: Path, scripted_agent: Callable[[str, str], str]) -> str:
    url = f"sqlite://{tmp_path}/j.db"
    agent = scripted_agent("pages", "done")
    for run_id in reversed(RUN_IDS):  # written out of order: the list sorts
        ran = runner.invoke(app, ["run", agent, "hi", "-j", url, "--run-id", run_id])
        assert ran.exit_code == 0, ran.output
    return url


def _ids(output: str) -> list[str]:
    return [json.loads(line)["run_id"] for line in output.splitlines()]


def test_pages_followed_by_their_hint_list_every_run_once_in_order(journal_url: str) -> None:
    """Following each page's `--after` hint lists every run exactly once, sorted; the last page has no hint."""
    seen: list[str] = []
    args = ["runs", "list", "-j", journal_url, "--json", "--limit", "3"]
    for _ in range(len(RUN_IDS)):
        listed = runner.invoke(app, args)
        assert listed.exit_code == 0, listed.output
        seen += _ids(listed.stdout)
        if not listed.stderr:
            break
        assert listed.stderr.startswith(f"{len(RUN_IDS) - len(seen)} more run"), listed.stderr
        nxt = listed.stderr.split("next page: ", 1)[1].split()
        args = [*nxt[1:], "-j", journal_url, "--json", "--limit", "3"]
    assert seen == RUN_IDS


def test_the_table_names_the_next_page_and_zero_lists_every_run(journal_url: str) -> None:
    """A human page ends with the command for the next one; `--limit 0` lists every run with no hint."""
    listed = runner.invoke(app, ["runs", "list", "-j", journal_url, "-n", "2"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    assert "5 more runs; next page: steadyloop runs list --app default --after r01" in listed.output
    every = runner.invoke(app, ["runs", "list", "-j", journal_url, "--json", "--limit", "0"])
    assert _ids(every.stdout) == RUN_IDS and not every.stderr


def test_after_without_app_is_refused(journal_url: str) -> None:
    """`--after` without `--app` is a usage error (exit 2) naming both options."""
    listed = runner.invoke(app, ["runs", "list", "-j", journal_url, "--after", "r01"])
    assert listed.exit_code == 2 and "--after needs --app" in listed.output


def test_a_page_reads_only_the_runs_it_returns(journal_url: str) -> None:
    """list_runs with a limit reads the streams of the runs it returns and no other run."""

    async def go() -> tuple[list[str], list[Any]]:
        async with await open_journal(journal_url) as journal:
            reads: list[Any] = []
            read = journal.read

            async def counted(namespace: str, stream: str, *args: Any, **kw: Any) -> Any:
                reads.append(stream)
                return await read(namespace, stream, *args, **kw)

            journal.read = counted  # type: ignore[method-assign]
            page = await list_runs(journal, "default", limit=2, after=("default", "r02"))
            assert await run_keys(journal) == [("default", r) for r in RUN_IDS]
            return [info.run_id for info in page], reads

    ids, reads = asyncio.run(go())
    assert ids == ["r03", "r04"]
    assert reads == [run_stream("r03"), run_stream("r04")], reads
