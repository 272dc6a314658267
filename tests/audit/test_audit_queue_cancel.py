"""A queue call cancelled mid-transaction leaves no transaction open behind it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from steadyloop.audit import TaskSpec
from steadyloop.audit._queue import SQLiteQueue


async def test_a_heartbeat_cancelled_while_waiting_to_begin_leaves_the_queue_usable(
    tmp_path: Path,
) -> None:
    """Cancelling a call that waits in BEGIN (another writer holds the file) rolls back behind it."""
    path = tmp_path / "q.db"
    queue = await SQLiteQueue.open(str(path), busy_timeout=5)
    try:
        await queue.submit(TaskSpec(prompt="p", task_id="t1"))
        claim = await queue.claim("w1", 30)
        assert claim is not None
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        beat = asyncio.ensure_future(queue.heartbeat("t1", claim.lease_token, 30))
        await asyncio.sleep(0.2)  # the heartbeat now waits in BEGIN IMMEDIATE
        beat.cancel()  # as Worker.run_once does when its round ends
        await asyncio.gather(beat, return_exceptions=True)
        other.execute("COMMIT")
        other.close()
        assert await queue.heartbeat("t1", claim.lease_token, 30)
        third = sqlite3.connect(path, isolation_level=None, timeout=2)
        third.execute("BEGIN IMMEDIATE")  # the file is not left write-locked
        third.execute("ROLLBACK")
        third.close()
    finally:
        await queue.close()
