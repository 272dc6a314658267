"""What every guard for another runtime shares: a ledger on a loop of its own.

A guard keeps its effects in an [EffectLedger][steadyloop.effects.EffectLedger] (the one
effect ledger, which says what each record means and what a re-executed effect does);
this module gives it a journal opened by URL and a private event loop, so that sync and
async callers of the runtime share it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Self, TypeVar

from steadyloop._errors import EffectFailed, GuardError
from steadyloop.effects import Begun, EffectLedger, Recorded, acting
from steadyloop.journal import Journal, open_journal
from steadyloop.records import RecordFactory

__all__ = ["Bridge", "Guard", "Raised", "replayed"]

T = TypeVar("T")

Raised = tuple[type[BaseException], ...]
"""Exception types an effect raises only when it did not act (``not_happened_on``)."""


def replayed(tool: str, found: Recorded) -> Any:
    """What a call whose effect is recorded gives: its value, or its error raised again.

    Raises:
        EffectFailed: The effect happened and failed.
    """
    if found.error is not None:
        raise EffectFailed(f"effect {tool!r} already ran and failed: {found.error}")
    return found.value


class Bridge:
    """A private event loop in a daemon thread, so sync and async callers share one journal.

    A runtime may call a tool from a worker thread (LangGraph's sync nodes) or from
    its own event loop; the journal lives on this loop either way.

    Args:
        name: The thread's name.
    """

    def __init__(self, name: str = "steadyloop-guard") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule a coroutine on the bridge's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the bridge's loop and wait for it (from any other thread)."""
        if threading.current_thread() is self._thread:
            raise GuardError("a guarded effect cannot be called from the guard's own loop")
        return self.submit(coro).result()

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the bridge's loop and await it from another loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        """Stop the loop and its thread (after everything scheduled ran)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


async def _open_records(
    url: str,
    namespace: str,
    wrap: Callable[[Journal], Journal] | None,
    records: RecordFactory | None,
) -> EffectLedger:
    """Open a journal by URL (on the running loop) as effect records."""
    journal: Journal = await open_journal(url)
    if wrap is not None:
        journal = wrap(journal)
    return EffectLedger(journal, namespace, records)


class Guard:
    """What every guard shares: its journal, opened by URL on a loop of its own.

    Args:
        url: The journal the intents and results go to (any Steadyloop backend).
        namespace: The journal namespace for them.
        wrap: Wraps the opened journal (test kits use it to model a crash).
        records: Where record ids and times come from.

    Attributes:
        ledger: The guard's [EffectLedger][steadyloop.effects.EffectLedger].
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        wrap: Callable[[Journal], Journal] | None = None,
        records: RecordFactory | None = None,
    ) -> None:
        self._bridge = Bridge()
        try:
            self.ledger: EffectLedger = self._bridge.run(
                _open_records(url, namespace, wrap, records)
            )
        except BaseException:
            self._bridge.stop()
            raise

    def perform(self, begun: Begun, call: Callable[[], T], not_happened_on: Raised = ()) -> T:
        """Run a sync effect whose intent is durable, then record how it ended."""
        with acting(begun):
            try:
                value = call()
            except Exception as exc:
                self._bridge.run(self.ledger.fail(begun, exc, not_happened_on))
                raise
        self._bridge.run(self.ledger.finish(begun, value))
        return value

    async def perform_async(
        self, begun: Begun, call: Callable[[], Awaitable[T]], not_happened_on: Raised = ()
    ) -> T:
        """Run an async effect whose intent is durable, then record how it ended."""
        with acting(begun):
            try:
                value = await call()
            except Exception as exc:
                await self._bridge.run_async(self.ledger.fail(begun, exc, not_happened_on))
                raise
        await self._bridge.run_async(self.ledger.finish(begun, value))
        return value

    def close(self) -> None:
        """Close the journal and stop the guard's thread."""
        self._bridge.run(self.ledger.journal.close())
        self._bridge.stop()

    def abandon(self) -> None:
        """Stop the guard's thread without closing its journal, as a killed process would."""
        self._bridge.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
