"""Child of the group-commit SIGKILL test: concurrent appenders that acknowledge each append.

Usage: ``python group_commit_child.py URL WRITERS``. Each writer appends one record at a
time to its own stream, forever, and prints ``STREAM SEQ`` once the append returned (so
the batch is durable). The parent kills the process with SIGKILL at some moment.
"""

from __future__ import annotations

import asyncio
import sys

from steadyloop.journal import StreamWrite, open_journal
from steadyloop.records import Record


async def main(url: str, writers: int) -> None:
    journal = await open_journal(url)

    async def writer(n: int) -> None:
        stream = f"w{n}"
        seq = 0
        while True:
            seq += 1
            record = Record(
                kind="test.item", payload={"i": seq, "tag": stream}, id=f"{n}-{seq}", time=1
            )
            await journal.append("app", StreamWrite(stream, [record], expected_next=seq))
            sys.stdout.write(f"{stream} {seq}\n")
            sys.stdout.flush()

    await asyncio.gather(*(writer(n) for n in range(writers)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
