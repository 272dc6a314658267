"""Child process of the prune kill test: prune URL before CUTOFF, SIGKILL after K deletions."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from steadyloop.journal import open_journal
from steadyloop.loop import Removed, prune_runs


async def main(url: str, cutoff: int, kill_after: int) -> None:
    """Prune; die by SIGKILL once ``kill_after`` streams are deleted."""
    done = 0

    def progress(removed: Removed) -> None:
        nonlocal done
        done += 1
        if done == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    async with await open_journal(url, create=False) as journal:
        await prune_runs(journal, cutoff, on_progress=progress)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
