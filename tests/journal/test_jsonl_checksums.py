"""JSONL batch checks: an edit that keeps every line valid JSON is still caught."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from steadyloop import (
    BackendUnavailable,
    CorruptionError,
    RecordFactory,
    SequentialIds,
    StepClock,
    StreamWrite,
)
from steadyloop.journal import JSONLJournal, namespace_filename, open_journal

NS = "checks"


async def write_batches(url: str, n: int = 3) -> None:
    make = RecordFactory(StepClock(), SequentialIds("r"))
    async with await open_journal(url) as journal:
        for i in range(n):
            await journal.append(
                NS,
                [
                    StreamWrite("a", [make("sent", {"sent": i})]),
                    StreamWrite("b", [make("note", {"i": i})]),
                ],
            )


def as_version_1(path: Path) -> None:
    """Rewrite a file as a version 1 file: no checks, as written before checksums."""
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace('"version":2', '"version":1')
    path.write_text("".join(re.sub(r',"check":"[0-9a-f]{8}"', "", ln) + "\n" for ln in lines))


async def test_every_batch_ends_with_a_check_and_the_header_says_version_2(tmp_path: Path) -> None:
    """New files are version 2, and the last line of each batch carries its check."""
    await write_batches(f"jsonl://{tmp_path}")
    lines = [json.loads(x) for x in (tmp_path / namespace_filename(NS)).read_text().splitlines()]
    assert lines[0]["version"] == 2
    assert ["check" in x for x in lines[1:]] == [False, True] * 3


async def test_an_edit_that_stays_valid_json_is_corruption_naming_file_and_batch(
    tmp_path: Path,
) -> None:
    """An edit of "sent":1 to "sent":9 on a middle line raises, naming the file and line."""
    await write_batches(f"jsonl://{tmp_path}")
    path = tmp_path / namespace_filename(NS)
    text = path.read_text()
    assert text.count('"sent":1}') == 1
    path.write_text(text.replace('"sent":1}', '"sent":9}'))
    async with await open_journal(f"jsonl://{tmp_path}") as journal:
        with pytest.raises(CorruptionError, match="does not match its check") as err:
            await journal.read(NS, "a")
    assert err.value.location == f"{path}:4"  # batch 2 starts at line 4
    assert "lines 4-5" in str(err.value)


async def test_a_changed_or_removed_check_is_corruption_in_a_version_2_file(tmp_path: Path) -> None:
    """Removing the check from a batch of a version 2 file does not make it pass."""
    await write_batches(f"jsonl://{tmp_path}")
    path = tmp_path / namespace_filename(NS)
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = re.sub(r',"check":"[0-9a-f]{8}"', "", lines[4])
    path.write_text("".join(lines))
    journal = await JSONLJournal.open(tmp_path)
    with pytest.raises(CorruptionError, match="batch 2 has no check"):
        await journal.read(NS, "a")
    await journal.close()


async def test_a_file_written_before_checksums_still_reads_and_counts_unchecked(
    tmp_path: Path,
) -> None:
    """A version 1 file reads as before; its old batches are unchecked, new ones checked."""
    await write_batches(f"jsonl://{tmp_path}")
    path = tmp_path / namespace_filename(NS)
    as_version_1(path)
    journal = await JSONLJournal.open(tmp_path)
    assert [r.payload for r in await journal.read(NS, "a")] == [{"sent": i} for i in range(3)]
    assert journal.unchecked_batches(NS) == 3
    await journal.append(NS, StreamWrite("a", [RecordFactory()("sent", {"sent": 3})]))
    await journal.close()
    assert journal.unchecked_batches(NS) == 3
    assert '"check":' in path.read_text().splitlines()[-1]


async def test_a_missing_directory_is_created_with_its_parents_unless_inspecting(
    tmp_path: Path,
) -> None:
    """jsonl:///a/b/c makes a, b and c; with create=False it is "no journal here"."""
    target = tmp_path / "a" / "b" / "c"
    with pytest.raises(BackendUnavailable, match=f"^jsonl://{target}: no journal here"):
        await open_journal(f"jsonl://{target}", create=False)
    assert not (tmp_path / "a").exists()
    await write_batches(f"jsonl://{target}", 1)
    assert (target / namespace_filename(NS)).exists()


async def test_the_url_of_a_relative_directory_is_the_documented_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jsonl:rel names itself jsonl:///abs/rel, never the jsonl://rel form."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel").mkdir()
    async with await open_journal("jsonl:rel") as journal:
        assert journal.url == f"jsonl://{tmp_path}/rel"
