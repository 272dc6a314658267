"""The JSONL backend's file rules: torn tails, corruption, power loss, one writer."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from steadyloop import (
    BackendUnavailable,
    CorruptionError,
    JournalLocked,
    RecordFactory,
    SequentialIds,
    StepClock,
    StreamWrite,
)
from steadyloop.journal import Files, JSONLJournal, namespace_filename, open_journal
from steadyloop.testing import FaultyFiles, SimulatedCrash

NS = "torn"


def _make() -> RecordFactory:
    return RecordFactory(StepClock(), SequentialIds("r"))


async def _write_batches(directory: Path, count: int) -> list[list[str]]:
    """Write ``count`` two-stream batches; return each batch's records as canonical JSON."""
    make = _make()
    batches = []
    async with await JSONLJournal.open(directory) as journal:
        for i in range(count):
            a = [make("a", {"i": i, "text": "é😀"}), make("a", {"i": i, "n": 2})]
            b = [make("b", {"i": i})]
            await journal.append(NS, [StreamWrite("a", a), StreamWrite("b", b)])
            batches.append([r.to_json() for r in a + b])
    return batches


async def _read_all(directory: Path) -> list[str]:
    async with await JSONLJournal.open(directory) as journal:
        a = await journal.read(NS, "a")
        b = await journal.read(NS, "b")
    # Rebuild batch order: batch i holds a[2i], a[2i+1], b[i].
    out = []
    for i in range(len(b)):
        out += [a[2 * i].record.to_json(), a[2 * i + 1].record.to_json(), b[i].record.to_json()]
    assert len(a) == 2 * len(b), "a batch was split between streams"
    return out


async def test_truncation_at_every_byte_of_the_last_batch(tmp_path: Path) -> None:
    """Cutting the file at any byte of its last batch loses exactly that batch, and appending works."""
    source = tmp_path / "source"
    source.mkdir()
    batches = await _write_batches(source, 3)
    data = (source / namespace_filename(NS)).read_bytes()
    lines = data.splitlines(keepends=True)
    last_batch_start = len(data) - sum(len(line) for line in lines[-3:])
    complete = [rec for batch in batches[:2] for rec in batch]
    for cut in range(last_batch_start, len(data) + 1):
        target = tmp_path / f"cut-{cut}"
        target.mkdir()
        (target / namespace_filename(NS)).write_bytes(data[:cut])
        expected = complete + (batches[2] if cut == len(data) else [])
        assert await _read_all(target) == expected, f"cut at byte {cut}"
        async with await JSONLJournal.open(target) as journal:
            result = await journal.append(NS, StreamWrite("b", [_make()("after")]))
            assert result.positions["b"][0] == len(expected) // 3 + 1
        reread = await _read_all_b(target)
        assert reread[-1] == "after", f"append after a cut at byte {cut} was lost"
        assert (target / namespace_filename(NS)).read_bytes().endswith(b"\n")


async def _read_all_b(directory: Path) -> list[str]:
    async with await JSONLJournal.open(directory) as journal:
        return [r.kind for r in await journal.read(NS, "b")]


async def test_torn_header_of_a_new_file_reads_as_empty(tmp_path: Path) -> None:
    """A file whose header line was torn holds nothing and is rewritten on the next append."""
    (tmp_path / namespace_filename(NS)).write_bytes(b'{"format":"steadyl')
    async with await JSONLJournal.open(tmp_path) as journal:
        assert await journal.read(NS, "a") == []
        await journal.append(NS, StreamWrite("a", [_make()("x")]))
    async with await JSONLJournal.open(tmp_path) as journal:
        assert [r.kind for r in await journal.read(NS, "a")] == ["x"]


@pytest.mark.parametrize(
    ("line_no", "replacement", "message"),
    [
        (3, b"{not json", "does not parse"),
        (3, b'{"batch":1}', "missing or not an integer"),
        (2, b"[1,2,3]", "must be a JSON object"),
        (1, b'{"format":"other","namespace":"torn","version":1}', "not a steadyloop-jsonl"),
    ],
)
async def test_garbled_terminated_line_is_corruption_naming_file_and_line(
    tmp_path: Path, line_no: int, replacement: bytes, message: str
) -> None:
    """A terminated line that does not parse or fit raises CorruptionError naming file:line."""
    await _write_batches(tmp_path, 3)
    path = tmp_path / namespace_filename(NS)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line_no - 1] = replacement + b"\n"
    path.write_bytes(b"".join(lines))
    async with await JSONLJournal.open(tmp_path) as journal:
        with pytest.raises(CorruptionError, match=message) as info:
            await journal.read(NS, "a")
        assert info.value.location == f"{path}:{line_no}"
        with pytest.raises(CorruptionError):
            await journal.append(NS, StreamWrite("a", [_make()("x")]))
    assert b"".join(lines) == path.read_bytes(), "a corrupted file must not be modified"


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        (2, "expected member 1 of batch 1 .size 3., found member 2"),
        (3, "batch 1 that starts at line 2 has 2 of 3 members"),
    ],
)
async def test_batch_missing_a_member_mid_file_is_corruption(
    tmp_path: Path, drop: int, message: str
) -> None:
    """A batch that lost a member before the end of the file is corruption, not a torn tail."""
    await _write_batches(tmp_path, 3)
    path = tmp_path / namespace_filename(NS)
    lines = path.read_bytes().splitlines(keepends=True)
    del lines[drop]  # a member of batch 1 (line 1 is the header)
    path.write_bytes(b"".join(lines))
    async with await JSONLJournal.open(tmp_path) as journal:
        with pytest.raises(CorruptionError, match=message) as info:
            await journal.read(NS, "b")
    assert info.value.location == f"{path}:{drop + 1}"


async def test_missing_whole_batch_mid_file_is_corruption(tmp_path: Path) -> None:
    """A whole batch missing from the middle of the file is caught by batch numbering."""
    await _write_batches(tmp_path, 3)
    path = tmp_path / namespace_filename(NS)
    lines = path.read_bytes().splitlines(keepends=True)
    del lines[4:7]  # batch 2
    path.write_bytes(b"".join(lines))
    async with await JSONLJournal.open(tmp_path) as journal:
        with pytest.raises(CorruptionError, match="a batch is missing") as info:
            await journal.read(NS, "a")
    assert info.value.location == f"{path}:5"


async def _power_loss_round(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    directory = tmp_path / f"power-{seed}"
    directory.mkdir()
    layer = FaultyFiles()
    make = _make()
    acknowledged: list[str] = []
    in_flight: list[str] | None = None
    layer.crash_before(rng.randint(1, 40)) if rng.random() < 0.5 else layer.cut_after(
        rng.randint(0, 6000)
    )
    journal = await JSONLJournal.open(directory, files=layer)
    try:
        for i in range(30):
            recs = [
                make("x", {"i": i, "pad": "p" * rng.randint(0, 120)})
                for _ in range(rng.randint(1, 4))
            ]
            in_flight = [r.to_json() for r in recs]
            await journal.append(NS, StreamWrite("s", recs))
            acknowledged += in_flight
            in_flight = None
    except SimulatedCrash:
        pass
    await journal.close()
    layer.power_loss(rng)
    async with await JSONLJournal.open(directory) as reopened:
        got = [r.record.to_json() for r in await reopened.read(NS, "s")]
        await reopened.append(NS, StreamWrite("s", [make("after-reboot")]))
        assert (await reopened.read(NS, "s"))[-1].kind == "after-reboot"
    assert got[: len(acknowledged)] == acknowledged, f"seed {seed}: an acknowledged batch was lost"
    extra = got[len(acknowledged) :]
    # Only the batch in flight may appear beyond the acknowledged ones, and only whole.
    assert extra in ([], in_flight), f"seed {seed}: unacknowledged data appeared: {extra}"


async def test_power_loss_never_loses_acknowledged_or_shows_torn_batches(tmp_path: Path) -> None:
    """Across many random crash points and power cuts, acknowledged batches survive and nothing torn appears."""
    for seed in range(150):
        await _power_loss_round(tmp_path, seed)


async def test_in_flight_batch_appears_only_if_its_sync_completed(tmp_path: Path) -> None:
    """A batch whose write was cut before its sync never appears after power loss."""
    layer = FaultyFiles()
    make = _make()
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        layer.crash_before(layer.operations + 2)  # the write happens, its sync does not
        with pytest.raises(SimulatedCrash):
            await journal.append(NS, StreamWrite("s", [make("second"), make("second")]))
    layer.power_loss()
    async with await JSONLJournal.open(tmp_path) as journal:
        assert [r.kind for r in await journal.read(NS, "s")] == ["first"]


async def test_new_file_is_followed_by_directory_sync(tmp_path: Path) -> None:
    """Creating a namespace file syncs its directory, so the file survives power loss."""
    layer = FaultyFiles()
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [_make()("x")]))
    layer.power_loss()
    assert (tmp_path / namespace_filename(NS)).exists()


async def test_second_writer_in_process_gets_locked_error(tmp_path: Path) -> None:
    """Two journals in one process on one namespace: the second writer is refused clearly."""
    async with (
        await JSONLJournal.open(tmp_path) as first,
        await JSONLJournal.open(tmp_path) as second,
    ):
        await first.append(NS, StreamWrite("s", [_make()("x")]))
        with pytest.raises(JournalLocked, match=r"held by another writer \(pid \d+\)"):
            await second.append(NS, StreamWrite("s", [_make()("y")]))
        assert [r.kind for r in await second.read(NS, "s")] == ["x"]  # readers never lock
    async with await JSONLJournal.open(tmp_path) as third:
        await third.append(NS, StreamWrite("s", [_make()("z")]))
        assert [r.kind for r in await third.read(NS, "s")] == ["x", "z"]


def test_second_writer_process_gets_locked_error(tmp_path: Path) -> None:
    """A writer process holding a stream makes another process's append fail clearly, with nothing interleaved."""
    holder = textwrap.dedent(
        f"""
        import asyncio, sys
        from steadyloop import RecordFactory, StreamWrite
        from steadyloop.journal import JSONLJournal
        async def main():
            async with await JSONLJournal.open({str(tmp_path)!r}) as j:
                await j.append({NS!r}, StreamWrite("s", [RecordFactory()("held")]))
                print("holding", flush=True)
                sys.stdin.readline()
        asyncio.run(main())
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        contender = textwrap.dedent(
            f"""
            import asyncio
            from steadyloop import RecordFactory, StreamWrite, JournalLocked
            from steadyloop.journal import JSONLJournal
            async def main():
                async with await JSONLJournal.open({str(tmp_path)!r}) as j:
                    try:
                        await j.append({NS!r}, StreamWrite("s", [RecordFactory()("late")]))
                    except JournalLocked as exc:
                        print("refused:", exc)
            asyncio.run(main())
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", contender],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.stdout.startswith("refused:"), out.stdout + out.stderr
        assert f"pid {proc.pid}" in out.stdout
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    lines = (tmp_path / namespace_filename(NS)).read_text().splitlines()
    assert len(lines) == 2 and '"held"' in lines[1]


async def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    """Inspecting a missing JSONL directory (create=False) names it; not a directory too."""
    with pytest.raises(BackendUnavailable, match=f"jsonl://{tmp_path}/nope: no journal here"):
        await open_journal(f"jsonl://{tmp_path}/nope", create=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(BackendUnavailable, match="not a directory"):
        await open_journal(f"jsonl://{tmp_path}/file")


async def test_read_only_directory_is_a_clear_error(read_only_dir: Path) -> None:
    """Opening a JSONL or SQLite journal in a read-only directory names the directory."""
    with pytest.raises(BackendUnavailable, match="not writable"):
        await open_journal(f"jsonl://{read_only_dir}")
    with pytest.raises(BackendUnavailable, match="not writable"):
        await open_journal(f"sqlite://{read_only_dir}/x.db")


async def test_namespace_file_names_keep_case_apart(tmp_path: Path) -> None:
    """Namespaces differing only by case map to different files, even on case-folding disks."""
    names = {namespace_filename(n).lower() for n in ["Run", "run", "RUN", "run ", "r/u"]}
    assert len(names) == 5
    assert all("/" not in n for n in names)
    long = namespace_filename("长" * 130)
    assert len(long) < 255


async def test_cancelled_append_keeps_the_namespace_until_its_write_is_done(tmp_path: Path) -> None:
    """Cancelling an append whose write is under way neither corrupts the file nor lets another append overlap it."""
    gate, entered = threading.Event(), threading.Event()

    class SlowFiles(Files):
        block = False

        def write(self, fd: int, data: bytes) -> None:
            if self.block and b'"batch":2' in data:
                self.block = False
                entered.set()
                gate.wait(10)
            super().write(fd, data)

    files = SlowFiles()
    make = _make()
    async with await JSONLJournal.open(tmp_path, files=files) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        files.block = True
        cancelled = asyncio.create_task(journal.append(NS, StreamWrite("s", [make("in-flight")])))
        await asyncio.to_thread(entered.wait, 10)
        cancelled.cancel()
        later = asyncio.create_task(journal.append(NS, StreamWrite("s", [make("later")])))
        await asyncio.sleep(0.05)
        assert not later.done(), "an append overlapped the write still under way"
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert (await later).positions == {"s": (3, 3)}
        assert [r.kind for r in await journal.read(NS, "s")] == ["first", "in-flight", "later"]
    async with await JSONLJournal.open(tmp_path) as reopened:
        assert [r.kind for r in await reopened.read(NS, "s")] == ["first", "in-flight", "later"]


async def test_listing_namespaces_never_races_an_append(tmp_path: Path) -> None:
    """A namespaces() call parsing a file while the first append takes it cannot hide that append."""
    gate, entered = threading.Event(), threading.Event()

    class SlowReads(Files):
        reads_to_block: int | None = None  # block the N-th read of the file from now

        def read(self, path: str) -> bytes | None:
            data = super().read(path)
            if self.reads_to_block is not None and path.endswith(namespace_filename(NS)):
                self.reads_to_block -= 1
                if self.reads_to_block == 0:
                    self.reads_to_block = None
                    entered.set()
                    gate.wait(10)
            return data

    make = _make()
    async with await JSONLJournal.open(tmp_path) as writer:
        await writer.append(NS, StreamWrite("s", [make("first")]))
    files = SlowReads()
    async with await JSONLJournal.open(tmp_path, files=files) as journal:
        files.reads_to_block = 2  # the header read, then the parse of the whole file
        listing = asyncio.create_task(journal.namespaces())
        await asyncio.to_thread(entered.wait, 10)
        appending = asyncio.create_task(journal.append(NS, StreamWrite("s", [make("second")])))
        await asyncio.sleep(0.05)
        gate.set()
        assert await listing == [NS]
        assert (await appending).positions == {"s": (2, 2)}
        assert [r.kind for r in await journal.read(NS, "s")] == ["first", "second"]
        assert (await journal.append(NS, StreamWrite("s", [make("third")]))).positions == {
            "s": (3, 3)
        }
    async with await JSONLJournal.open(tmp_path) as reopened:
        assert [r.kind for r in await reopened.read(NS, "s")] == ["first", "second", "third"]


async def test_a_batch_whose_fsync_failed_is_never_reported_durable(tmp_path: Path) -> None:
    """After a failed fsync the batch is cut out: its retry writes it anew, and power loss loses nothing acknowledged."""
    layer = FaultyFiles()
    make = _make()
    second = [make("second"), make("second")]
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        layer.fail_syncs(1)
        with pytest.raises(BackendUnavailable, match="fsync failure"):
            await journal.append(NS, StreamWrite("s", second), idempotency_key="k2")
        assert [r.kind for r in await journal.read(NS, "s")] == ["first"]
        retried = await journal.append(NS, StreamWrite("s", second), idempotency_key="k2")
        assert not retried.duplicate and retried.positions == {"s": (2, 3)}
        await journal.append(NS, StreamWrite("s", [make("third")]))
    layer.power_loss()
    async with await JSONLJournal.open(tmp_path) as journal:
        kinds = [r.kind for r in await journal.read(NS, "s")]
    assert kinds == ["first", "second", "second", "third"]


async def test_a_failed_fsync_that_cannot_be_undone_stops_all_writes(tmp_path: Path) -> None:
    """If cutting a failed batch back out fails too, the namespace refuses writes, naming why."""
    layer = FaultyFiles()
    make = _make()
    async with await JSONLJournal.open(tmp_path, files=layer) as journal:
        await journal.append(NS, StreamWrite("s", [make("first")]))
        layer.fail_syncs(2)
        with pytest.raises(BackendUnavailable, match="could not be cut back out"):
            await journal.append(NS, StreamWrite("s", [make("second")]))
        with pytest.raises(BackendUnavailable, match="Check the disk, then open the journal"):
            await journal.append(NS, StreamWrite("s", [make("third")]))
        await journal.append("other", StreamWrite("s", [make("elsewhere")]))
