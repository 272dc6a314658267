"""A stand-in worker holding planted secrets; it runs one probing verify command.

Usage: python audit_secret_worker.py subprocess|bubblewrap SECRET_FILE WORKDIR OUT

Its own environment (set by the test) holds ``PLANTED_TOKEN`` and
``ALLOWED_BUT_UNASKED`` (allowed by the worker, asked for by no task); it opens
``SECRET_FILE`` as an inheritable descriptor and deletes it, so the third secret is
reachable only through that descriptor. What the command saw is written to ``OUT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from steadyloop.audit import BubblewrapExecutor, SubprocessExecutor, Verifier, VerifySpec

PROBE = r"""
echo "== env"; env
echo "== parent"; cat /proc/$PPID/environ /proc/$PPID/cmdline /proc/1/environ /proc/1/cmdline
echo "== worker"; cat /proc/$WORKER_PID/environ /proc/$WORKER_PID/cmdline
for f in /proc/$WORKER_PID/fd/* /proc/self/fd/* /proc/$PPID/fd/*; do timeout 1 cat "$f" </dev/null; done
echo "== all"; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; done
echo "== done"
"""


async def main(kind: str, secret_file: str, workdir: str, out: str) -> None:
    fd = os.open(secret_file, os.O_RDONLY)
    os.set_inheritable(fd, True)
    os.unlink(secret_file)
    allow = ["ALLOWED_BUT_UNASKED"]
    executor = BubblewrapExecutor(allow_env=allow) if kind == "bubblewrap" else None
    executor = executor or SubprocessExecutor(allow_env=allow)
    spec = VerifySpec(("sh", "-c", PROBE), env={"WORKER_PID": str(os.getpid())}, timeout=60)
    result = await executor.run(spec.command, cwd=workdir, timeout=60, env=spec.env)
    verification = await Verifier(executor, evidence_limit=10**7).verify(spec, workdir)
    seen = {"stdout": result.stdout, "stderr": result.stderr, "evidence": verification.evidence}
    Path(out).write_text(json.dumps(seen), encoding="utf-8")
    os.close(fd)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
