"""A claimer process for the PostgreSQL test: claim, hold, release, log each hold.

Usage: python audit_pg_claimer.py URL WORKER SECONDS LOG
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

from steadyloop.audit import TaskStatus, open_queue


async def main(url: str, worker: str, seconds: float, log: str) -> None:
    queue = await open_queue(url)
    holds = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            claim = await queue.claim(worker, lease=30)
            if claim is None:
                await asyncio.sleep(0.005)
                continue
            acquired = time.monotonic()
            await asyncio.sleep(random.uniform(0.001, 0.01))
            released = time.monotonic()
            holds.append([claim.task_id, worker, acquired, released])
            await queue.settle(
                claim.task_id, claim.lease_token, TaskStatus.QUEUED, round=0, audit_rounds=0
            )
    finally:
        await queue.close()
    Path(log).write_text(json.dumps(holds), encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]))
