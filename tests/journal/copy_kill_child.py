"""Child process of the copy kill tests: copy SRC to DST and SIGKILL itself after K chunks."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from steadyloop.journal import copy_journal, open_journal


async def main(source: str, destination: str, kill_after: int) -> None:
    """Copy two records per chunk; die by SIGKILL once ``kill_after`` chunks are durable."""
    done = 0

    def progress(namespace: str, stream: str, head: int) -> None:
        nonlocal done
        done += 1
        if done == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    async with await open_journal(source, create=False) as src:
        async with await open_journal(destination) as dst:
            await copy_journal(src, dst, chunk=2, on_progress=progress)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
