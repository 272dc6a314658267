"""Drive the shared SQL plans of `steadyloop.journal._sql` with an async driver.

The plans are driver-free generators; `run_sync` drives them on SQLite's
synchronous driver, and `run_async` here drives them on the server drivers
(psycopg, asyncmy). The transaction around a plan, and what to do when the database
refuses it, is each backend's business; `retry_transaction` holds the loop they
share.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from steadyloop._errors import BackendUnavailable, UnknownBackend
from steadyloop.journal._sql import Dialect, Plan, Query, Row

__all__ = [
    "LostWhilePreparing",
    "RetryPolicy",
    "pool_options",
    "prepare_retrying",
    "retry_transaction",
    "run_async",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")
D = TypeVar("D", bound=Dialect)


def pool_options(
    url: str,
    own: Mapping[str, str],
    dialect: Callable[[str | None], D],
    *,
    prefix: str | None,
    pool_size: int | None,
    retries: int | None,
) -> tuple[D, int, RetryPolicy]:
    """Read the options every pooled server backend takes: ``prefix``, ``pool_size``, ``retries``.

    Keyword arguments win over the URL's query parameters (``own``).

    Args:
        url: The URL as shown in errors (password redacted).
        own: The URL's query parameters that Steadyloop reads itself.
        dialect: Builds the dialect from a table prefix (``None``: the default).
        prefix: The table prefix, if given as an argument.
        pool_size: Most connections, if given as an argument (default 10).
        retries: Most attempts of a refused transaction, if given (default 10).

    Returns:
        The dialect, the pool size and the retry policy.

    Raises:
        UnknownBackend: An option is malformed.
    """
    try:
        size = int(pool_size if pool_size is not None else own.get("pool_size", 10))
        attempts = int(retries if retries is not None else own.get("retries", 10))
    except ValueError as exc:
        raise UnknownBackend(f"{url}: bad option: {exc}") from None
    if size < 1:
        raise UnknownBackend(f"{url}: pool_size must be >= 1")
    try:
        built = dialect(prefix if prefix is not None else own.get("prefix"))
    except ValueError as exc:
        raise UnknownBackend(f"{url}: {exc}") from None
    return built, size, RetryPolicy(attempts=max(1, attempts))


async def run_async(plan: Plan, execute: Callable[[Query], Awaitable[list[Row]]]) -> Any:
    """Drive a plan with an asynchronous ``execute`` and return the plan's result.

    Args:
        plan: A plan from `steadyloop.journal._sql`.
        execute: Runs one query and returns its rows (an empty list when the query
            does not fetch).

    Returns:
        Whatever the plan returns.
    """
    try:
        query = next(plan)
        while True:
            rows = await execute(query)
            query = plan.send(rows)
    except StopIteration as stop:
        return stop.value
    finally:
        plan.close()


class RetryPolicy:
    """How often, and how patiently, a refused transaction is run again.

    Attributes:
        attempts: The most times a plan is run, counting the first.
        base_delay: The first pause in seconds; it doubles after each refusal, with
            random jitter so that two refused transactions do not collide again.
        max_delay: The longest pause.
    """

    def __init__(
        self, attempts: int = 10, base_delay: float = 0.002, max_delay: float = 0.2
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.attempts = attempts
        self.base_delay = base_delay
        self.max_delay = max_delay

    def delay(self, attempt: int) -> float:
        """The pause before attempt number ``attempt + 1`` (``attempt`` counts from 1)."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)


async def retry_transaction(
    attempt: Callable[[], Awaitable[T]],
    should_retry: Callable[[BaseException], bool],
    policy: RetryPolicy,
    *,
    budget: float | None = None,
) -> T:
    """Run ``attempt`` until it succeeds, a non-retryable error occurs, or attempts run out.

    ``attempt`` must run a whole transaction from a fresh plan each time: a retried
    transaction starts from scratch, so the database's refusal (a serialisation
    failure, a deadlock, a concurrent insert of the same idempotency key) leaves
    nothing behind and the rerun sees the winner's committed work.

    Args:
        attempt: Runs one transaction.
        should_retry: Whether an error from ``attempt`` is a refusal worth retrying.
        policy: How many attempts and what pauses.
        budget: Seconds after which no further attempt starts (``None``: attempts only).

    Returns:
        The result of the first successful attempt.

    Raises:
        BaseException: The last error, when it is not retryable or attempts ran out.
    """
    loop = asyncio.get_running_loop()
    deadline = None if budget is None else loop.time() + budget
    for number in range(1, policy.attempts + 1):
        pause = policy.delay(number)
        try:
            return await attempt()
        except Exception as exc:
            if number >= policy.attempts or not should_retry(exc):
                raise
            if deadline is not None and loop.time() + pause > deadline:
                raise
            _log.info(
                "attempt %d of %d failed (%s: %s); retrying in %.3f s",
                number,
                policy.attempts,
                type(exc).__name__,
                exc,
                pause,
            )
        await asyncio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


class LostWhilePreparing(Exception):
    """The server ended the connection while the tables were prepared: prepare again.

    Attributes:
        error: What to raise if no later attempt succeeds.
    """

    def __init__(self, error: BackendUnavailable) -> None:
        super().__init__(str(error))
        self.error = error


_PREPARE_RETRY = RetryPolicy(attempts=100, base_delay=0.05, max_delay=1.0)
"""Pauses before preparing the tables again after the server ended the connection."""


async def prepare_retrying(prepare: Callable[[], Awaitable[None]], budget: float) -> None:
    """Run an opener's table preparation, again on a new connection after each cut.

    The preparation must be idempotent (the schema plan is), so a connection the
    server ends half-way (a restart, ``pg_terminate_backend``, ``KILL``) costs the open
    nothing. ``prepare`` raises `LostWhilePreparing` for such a cut.

    Args:
        prepare: Connects, prepares the tables and reads the server's settings.
        budget: Seconds after which no further attempt starts (the connect timeout).

    Raises:
        BackendUnavailable: The preparation failed otherwise, or kept being cut.
    """
    try:
        await retry_transaction(
            prepare, lambda exc: isinstance(exc, LostWhilePreparing), _PREPARE_RETRY, budget=budget
        )
    except LostWhilePreparing as lost:
        raise lost.error from lost.__cause__
