"""Stopping runs on request: at the next write boundary, or at once, and always resumable.

Give ``run``/``resume`` a ``stop`` event. Once it is set, the driver lets the effect in
flight finish, writes its result together with a ``run.stopped`` record (one batch),
and returns [StopReason.STOPPED][steadyloop.loop.StopReason]: no new intent is
written, the claim is released, and the run can be resumed. If the task driving the
run is cancelled while ``stop`` is set, the run stops at once instead: the effect in
flight is abandoned with its intent open (a ``SAFE`` one is done again on resume, a
``NEVER`` one stops the resumed run with ``RESUME_STATE_UNKNOWN``), and the run is
still resumable. A cancelled task whose ``stop`` is not set ends the run
``CANCELLED``, as before.

[SignalStop][steadyloop.loop.SignalStop] maps signals onto that: the first SIGINT or
SIGTERM sets ``stop``, the second stops at once.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType, TracebackType
from typing import Any

from steadyloop.loop._tools import inline_tool_running

__all__ = ["SignalStop"]


class SignalStop:
    """Turn SIGINT and SIGTERM into stop requests for the runs of one task.

    Enter it in the task that drives the runs, with its event loop running, in the
    main thread (elsewhere it installs nothing: Python delivers signals to the main
    thread only); it restores the previous handlers on exit.

    * The first signal sets ``stop``: every run given that event stops at its next
      write boundary and can be resumed. ``on_first(signum)`` is called (from the
      signal handler) to tell the person what happens.
    * A further signal stops at once: it cancels the task that entered the block (the
      runs, seeing ``stop`` set, record ``run.stopped`` instead of ending), or, if a
      synchronous tool is running inline and so holds the event loop, raises
      ``asyncio.CancelledError`` inside that tool.

    Examples:
        ```python
        stop = asyncio.Event()
        with SignalStop(stop) as signals:
            result = await resume(agent, journal, "app", "r1", stop=stop)
        if result.stop_reason is StopReason.STOPPED:
            print(f"stopped by signal {signals.received}; resume it later")
        ```

    Attributes:
        stop: The event the runs watch.
        received: The first signal received, or ``None``.
        count: How many signals were received.
    """

    def __init__(
        self,
        stop: asyncio.Event,
        *,
        signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
        on_first: Callable[[int], None] | None = None,
    ) -> None:
        self.stop = stop
        self.signals = tuple(signals)
        self.on_first = on_first
        self.received: int | None = None
        self.count = 0
        self._previous: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None

    def __enter__(self) -> SignalStop:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if threading.current_thread() is not threading.main_thread():
            return self  # Python delivers signals to the main thread only
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        loop = self._loop
        assert loop is not None
        if self.count == 1:
            self.received = signum
            # Set at once, not through the loop: an inline tool may hold the loop, and
            # the stop must be in force before a further signal stops that tool.
            self.stop.set()
            loop.call_soon_threadsafe(_nothing)  # wake the loop if it is waiting
            if self.on_first is not None:
                self.on_first(signum)
            return
        if inline_tool_running():
            # The event loop waits for this very function: only an exception raised
            # here reaches the run, which handles it as a cancelled task.
            raise asyncio.CancelledError("stopped at once by a signal")
        if self._task is not None:
            loop.call_soon_threadsafe(self._task.cancel)


def _nothing() -> None:
    """Scheduled only to wake an event loop waiting in ``select``."""
