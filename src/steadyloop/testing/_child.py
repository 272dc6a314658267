"""A writer process for the multi-process conformance test.

Usage: ``python -m steadyloop.testing._child URL NAMESPACE STREAM WRITER BATCHES``.
Each batch is three records appended in one call by a freshly opened journal, which
is closed again, so file locks change hands between processes. A writer that finds
the stream held by another ([`JournalLocked`][steadyloop.JournalLocked]) waits and retries.
Prints ``acked N`` at the end.
"""

from __future__ import annotations

import asyncio
import sys
import time

from steadyloop._errors import JournalLocked
from steadyloop.journal._factory import open_journal
from steadyloop.journal._protocol import StreamWrite
from steadyloop.records import RecordFactory, SequentialIds, StepClock


async def _main(url: str, namespace: str, stream: str, writer: int, batches: int) -> int:
    make = RecordFactory(StepClock(), SequentialIds(f"w{writer}"))
    acked = 0
    deadline = time.monotonic() + 120
    for b in range(batches):
        records = [make("w", {"w": writer, "b": b, "i": i}) for i in range(3)]
        while True:
            try:
                async with await open_journal(url) as journal:
                    await journal.append(namespace, StreamWrite(stream, records))
                break
            except JournalLocked:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.01)
        acked += 1
    return acked


def main() -> None:
    """Run one writer and print how many batches were acknowledged."""
    url, namespace, stream, writer, batches = sys.argv[1:6]
    acked = asyncio.run(_main(url, namespace, stream, int(writer), int(batches)))
    print(f"acked {acked}")


if __name__ == "__main__":
    main()
