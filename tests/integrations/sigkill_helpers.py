"""Real SIGKILLs of guarded agents: a forked zygote per framework, and the kill loop.

A zygote (``lg_sigkill_child.py``, ``oa_sigkill_child.py``) imports its framework once
and forks a child per attempt, so a kill costs milliseconds, not an interpreter start.
Each attempt drives one order towards its end; the loop SIGKILLs it until an attempt
finishes by itself, and the fsynced effect sink says what happened.

Kills at random moments mostly land where nothing is at stake: on these small agents
they found no repeat even without a guard. An **aimed** kill waits until the attempt's
sink shows an effect named by ``aim`` (one more than before the attempt), then lands
within ``AIMED_WINDOW`` of it: between the effect and the writes that record it, the
moment a guard exists for. An attempt that makes no such effect runs to its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from steadyloop.testing import EffectSink

AIMED_WINDOW = 0.03
"""An aimed kill lands uniformly within this many seconds after the effect."""
AIM_TIMEOUT = 30.0
"""How long an aimed kill waits for its effect before it lets the attempt be."""


def serve(attempt: Callable[..., int]) -> None:
    """A zygote's loop: for each JSON command on stdin, fork a child that runs one attempt.

    Prints the child's pid, waits for it, then prints its wait status.
    """
    for line in sys.stdin:
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = attempt(**cmd)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": status}), flush=True)


@contextmanager
def zygote(child: Path) -> Iterator[subprocess.Popen[str]]:
    """Start a zygote; close it afterwards."""
    proc = subprocess.Popen(
        [sys.executable, str(child)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for_effect(pid: int, sink: Path, action: str, before: int) -> bool:
    """Wait until the sink holds more than ``before`` effects named ``action``, or the child ends."""
    deadline = time.monotonic() + AIM_TIMEOUT
    while time.monotonic() < deadline and _alive(pid):
        if _count(sink, action) > before:
            return True
        time.sleep(0.001)
    return False


def _count(sink: Path, action: str) -> int:
    return sum(1 for e in EffectSink(sink).effects() if e.get("action") == action)


def drive(
    proc: subprocess.Popen[str],
    cmd: dict[str, object],
    rng: random.Random,
    max_delay: float,
    aim: tuple[Path, str] | None = None,
) -> tuple[int, int]:
    """Run attempts of one order, each SIGKILLed, until one finishes.

    Unaimed, the kill lands uniformly within a window that widens after each kill in
    a row. Aimed (``aim`` is the sink and the effect's action), it lands within
    ``AIMED_WINDOW`` after that effect, or not at all when the attempt makes none.

    Returns:
        The kills, and the exit code of the attempt that finished.
    """
    assert proc.stdin is not None and proc.stdout is not None
    kills = 0
    window = max_delay
    for _ in range(200):
        before = 0 if aim is None else _count(*aim)
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        pid = json.loads(proc.stdout.readline())["pid"]
        if aim is None:
            time.sleep(rng.uniform(0.0, window))
            kill = True
        else:
            kill = _wait_for_effect(pid, aim[0], aim[1], before)
            time.sleep(rng.uniform(0.0, AIMED_WINDOW))
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        status = json.loads(proc.stdout.readline())["status"]
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            kills += 1
            window *= 1.3  # a slow machine still lets an attempt finish in the end
            continue
        return kills, os.WEXITSTATUS(status)
    raise AssertionError("the order never finished")


def kill_until(
    child: Path,
    command: Callable[[str, int], dict[str, object]],
    sink: Path,
    *,
    target: int,
    seed: int,
    max_delay: float,
    aim: str | None = None,
) -> tuple[int, Counter[str], int]:
    """Kill attempts until ``target`` kills landed; return (kills, effect counts, orders).

    Args:
        child: The zygote's script.
        command: The attempt command for an order (its name and number).
        sink: The effect sink the attempts write to.
        target: How many kills must land.
        seed: Seeds the kill moments.
        max_delay: The first window of an unaimed kill, in seconds.
        aim: Aim each kill right after this tool's effect on the attempt's order
            (``"charge"`` kills right after ``charge/ORDER``).
    """
    rng = random.Random(seed)
    kills = orders = 0
    with zygote(child) as proc:
        while kills < target:
            order = f"order-{orders}"
            aimed = None if aim is None else (sink, f"{aim}/{order}")
            k, code = drive(proc, command(order, orders), rng, max_delay, aimed)
            orders += 1
            assert code == 0, f"{order} ended with exit code {code}"
            kills += k
    counts = Counter(str(e["action"]) for e in EffectSink(sink).effects())
    return kills, counts, orders


def check_each_order_charged_once(counts: Counter[str], orders: int) -> None:
    """Every order was charged exactly once, and looked up and notified at least once."""
    for n in range(orders):
        charged = counts[f"charge/order-{n}"]
        assert charged == 1, f"order-{n} charged {charged} times"
        assert counts[f"lookup/order-{n}"] >= 1
        assert counts[f"notify/order-{n}"] >= 1
