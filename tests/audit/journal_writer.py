"""A process appending to a journal until it is killed; it logs each acknowledged append.

Usage: python journal_writer.py URL LOG GENERATION

It appends one record at a time to stream ``writer-GENERATION`` of namespace
``chaoswriter``, each batch under the idempotency key ``GENERATION-N``. After an append
returns, it writes ``{"ack": N, "gen": GENERATION, "id": RECORD_ID, "time": …}`` to LOG
(one ``write`` of one line, so a SIGKILL leaves whole lines). An append that fails is
logged as ``{"error": …, "n": N, "took": SECONDS}`` and tried again, with the same key,
until it goes through: a test kills the process whenever it likes and then checks that
every acknowledged append is in the journal, once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from steadyloop.journal import StreamWrite, open_journal
from steadyloop.records import RecordFactory

NAMESPACE = "chaoswriter"


def stream(generation: int) -> str:
    """The stream a writer of ``generation`` appends to."""
    return f"writer-{generation}"


async def main(url: str, log_path: str, generation: int) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(entry: dict[str, Any]) -> None:
        os.write(fd, (json.dumps({**entry, "time": time.time()}) + "\n").encode())

    records = RecordFactory()
    journal = None
    while journal is None:  # the store may be in the middle of a fault
        try:
            journal = await open_journal(url)
        except Exception as exc:
            log({"error": f"open: {type(exc).__name__}: {exc}"[:300], "n": 0, "took": 0})
            await asyncio.sleep(0.5)
    log({"open": generation})
    n = 0
    while True:
        n += 1
        rec = records("writer.note", {"n": n, "gen": generation})
        while True:
            began = time.monotonic()
            try:
                await journal.append(
                    NAMESPACE,
                    [StreamWrite(stream(generation), [rec])],
                    idempotency_key=f"{generation}-{n}",
                )
            except Exception as exc:
                took = round(time.monotonic() - began, 2)
                log({"error": f"{type(exc).__name__}: {exc}"[:300], "n": n, "took": took})
                await asyncio.sleep(0.2)
                continue
            log({"ack": n, "gen": generation, "id": rec.id})
            break
        await asyncio.sleep(0.02)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
