"""``steadyloop journal copy``: every stream, record and key arrives, verified, resumably."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backends import store_url
from steadyloop import CopyRefused, RecordFactory, SequentialIds, StepClock, StreamWrite
from steadyloop.cli import app
from steadyloop.cli._journal import diagnose
from steadyloop.journal import Journal, compare_journals, copy_journal, open_journal

runner = CliRunner()

PAIRS = [
    ("sqlite", "postgres"),
    ("postgres", "sqlite"),
    ("sqlite", "mysql"),
    ("sqlite", "redis"),
    ("jsonl", "sqlite"),
    ("sqlite", "jsonl"),
    ("redis", "sqlite"),
    ("mysql", "postgres"),
]


async def fill(journal: Journal, *, namespaces: tuple[str, ...] = ("app", "其他")) -> int:
    """Write streams of several lengths, a batch over two streams and keyed batches."""
    make = RecordFactory(StepClock(), SequentialIds("r"))
    count = 0
    for ns in namespaces:
        for i in range(7):
            await journal.append(ns, StreamWrite("long", [make("n", {"i": i, "ns": ns})]))
            count += 1
        await journal.append(
            ns,
            [
                StreamWrite("a", [make("x", {"v": 1}), make("x", {"v": 2})]),
                StreamWrite("b", [make("y", {"text": "你好 \u2028"})]),
            ],
            idempotency_key="both",
        )
        await journal.append(ns, StreamWrite("a", [make("x", {"v": 3})]), idempotency_key="k2")
        count += 4
    return count


async def total(journal: Journal) -> int:
    """How many records the journal holds."""
    count = 0
    for ns in await journal.namespaces():
        for stream in await journal.streams(ns):
            count += await journal.head(ns, stream)
    return count


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
async def test_copy_between_backends_is_exact(src: str, dst: str, tmp_path: Path) -> None:
    """Every record keeps its sequence number and text, and a copied key stays a duplicate."""
    async with store_url(src, tmp_path) as src_url, store_url(dst, tmp_path) as dst_url:
        async with await open_journal(src_url) as source, await open_journal(dst_url) as dest:
            written = await fill(source)
            report = await copy_journal(source, dest)
            assert report.differences == []
            assert report.records_copied == written and report.keys_copied == 4
            assert await compare_journals(source, dest) == []
            assert [r.record for r in await dest.read("app", "a")] == [
                r.record for r in await source.read("app", "a")
            ]
            make = RecordFactory(StepClock(), SequentialIds("r"))
            again = await dest.append(
                "app",
                [
                    StreamWrite("a", [make("x", {"v": 1}), make("x", {"v": 2})]),
                    StreamWrite("b", [make("y", {"text": "你好 \u2028"})]),
                ],
                idempotency_key="both",
            )
            assert again.duplicate and await dest.head("app", "a") == 3
            if src != "redis":  # Redis keeps no stream names with the keys it writes
                assert dict(again.positions) == {"a": (1, 2), "b": (1, 1)}
            assert await diagnose(dest) == []


async def test_a_second_copy_writes_nothing(tmp_path: Path) -> None:
    """Copying again into a finished copy finds everything there and writes nothing."""
    async with store_url("sqlite", tmp_path) as a, store_url("jsonl", tmp_path) as b:
        async with await open_journal(a) as source, await open_journal(b) as dest:
            written = await fill(source)
            await copy_journal(source, dest)
            report = await copy_journal(source, dest)
            assert (report.records_copied, report.records_present) == (0, written)
            assert (report.keys_copied, report.keys_present) == (0, 4)
            assert report.differences == []


async def test_a_destination_with_other_streams_is_refused_unless_merging(tmp_path: Path) -> None:
    """Streams the source lacks refuse a copy; --merge keeps them and adds the source's."""
    async with store_url("sqlite", tmp_path) as a, store_url("sqlite", tmp_path) as b:
        async with await open_journal(a) as source, await open_journal(b) as dest:
            await fill(source)
            await fill(dest, namespaces=("mine",))
            with pytest.raises(CopyRefused, match="--merge"):
                await copy_journal(source, dest)
            assert await dest.namespaces() == ["mine"]
            report = await copy_journal(source, dest, merge=True)
            assert report.differences == []
            assert await dest.namespaces() == ["app", "mine", "其他"]


async def test_a_colliding_stream_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A destination stream that is not a beginning of the source's refuses even a merge."""
    async with store_url("sqlite", tmp_path) as a, store_url("sqlite", tmp_path) as b:
        async with await open_journal(a) as source, await open_journal(b) as dest:
            await fill(source)
            make = RecordFactory(StepClock(), SequentialIds("other"))
            await dest.append("app", StreamWrite("long", [make("n", {"i": 99})]))
            with pytest.raises(CopyRefused, match="app/long collides: record 1"):
                await copy_journal(source, dest, merge=True)
            assert await total(dest) == 1


def test_cli_exit_codes(tmp_path: Path) -> None:
    """The CLI exits 2 with one line naming the URL on bad input, 0 on an exact copy."""
    src = f"sqlite://{tmp_path}/src.db"
    missing = runner.invoke(app, ["journal", "copy", src, f"sqlite://{tmp_path}/d.db"])
    assert missing.exit_code == 2 and "src.db" in missing.output
    assert not (tmp_path / "d.db").exists()

    async def make_source() -> None:
        async with await open_journal(src) as j:
            await fill(j)

    asyncio.run(make_source())
    same = runner.invoke(app, ["journal", "copy", src, src])
    assert same.exit_code == 2 and "same journal" in same.output
    memory = runner.invoke(app, ["journal", "copy", src, "memory://x"])
    assert memory.exit_code == 2
    ok = runner.invoke(app, ["journal", "copy", src, f"jsonl://{tmp_path}/j"], terminal_width=300)
    assert ok.exit_code == 0, ok.output
    assert "ok" in ok.output
    again = runner.invoke(app, ["journal", "copy", src, f"sqlite://{tmp_path}/other.db"])
    assert again.exit_code == 0
    clash = runner.invoke(app, ["journal", "copy", f"sqlite://{tmp_path}/other.db", src])
    assert clash.exit_code == 0  # identical content: nothing to do, nothing differs


KILLS = [
    ("sqlite", "postgres", 3),
    ("jsonl", "sqlite", 5),
    ("sqlite", "redis", 9),
    ("sqlite", "mysql", 1),
]


@pytest.mark.chaos(smoke=["sqlite-postgres-after-3"])
@pytest.mark.parametrize(
    ("src", "dst", "kill_after"), KILLS, ids=[f"{a}-{b}-after-{k}" for a, b, k in KILLS]
)
async def test_sigkill_during_copy_then_rerun(
    src: str, dst: str, kill_after: int, tmp_path: Path
) -> None:
    """A copy killed after some chunks is finished by a rerun: nothing lost, nothing twice."""
    async with store_url(src, tmp_path) as src_url, store_url(dst, tmp_path) as dst_url:
        async with await open_journal(src_url) as source:
            written = await fill(source)
        child = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("copy_kill_child.py")),
                src_url,
                dst_url,
                str(kill_after),
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ},
        )
        assert child.returncode == -signal.SIGKILL, child.stderr
        async with await open_journal(dst_url) as dest:
            partial = await total(dest)
        assert 0 < partial < written
        rerun = await asyncio.to_thread(
            runner.invoke, app, ["journal", "copy", src_url, dst_url, "--json"]
        )
        assert rerun.exit_code == 0, rerun.output
        assert f'"records_copied":{written - partial}' in rerun.output
        assert f'"records_present":{partial}' in rerun.output
        async with await open_journal(src_url) as source, await open_journal(dst_url) as dest:
            assert await total(dest) == written
            assert await compare_journals(source, dest) == []
            assert await diagnose(dest) == []


def test_task_trails_are_copied_and_the_queue_tables_are_named(tmp_path: Path) -> None:
    """An audit task's trail arrives in the destination, and the CLI says the queue's tables do not."""
    from steadyloop.audit import TaskBoard, TaskSpec

    src = f"sqlite://{tmp_path}/src.db"

    async def submit() -> None:
        board = await TaskBoard.open(src)
        try:
            await board.submit(TaskSpec(task_id="t1", prompt="do it"))
        finally:
            await board.close()

    asyncio.run(submit())
    dst = f"jsonl://{tmp_path}/dst"
    result = runner.invoke(app, ["journal", "copy", src, dst], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "audit queue" in result.output

    async def trail() -> list[str]:
        async with await open_journal(dst, create=False) as journal:
            return [s for ns in await journal.namespaces() for s in await journal.streams(ns)]

    assert '["task","t1"]' in asyncio.run(trail())
