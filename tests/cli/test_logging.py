"""The command line's log output: -v and -q, one line per event, retries said."""

from __future__ import annotations

import asyncio
import logging

import pytest
from typer.testing import CliRunner

from steadyloop._logging import OneLineFormatter, cli_logging
from steadyloop.cli import app
from steadyloop.journal._sql_async import RetryPolicy, retry_transaction


def _record(message: str, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("steadyloop.audit", logging.WARNING, __file__, 1, message, (), info)


def test_an_event_with_line_breaks_and_a_traceback_is_one_line() -> None:
    """A message with line breaks and a traceback is formatted on exactly one line, keeping both."""
    try:
        raise ValueError("inner\nline")
    except ValueError as exc:
        caught = exc
    text = OneLineFormatter().format(_record("first\r\nsecond\nthird", caught))
    assert "\n" not in text and "\r" not in text
    assert "first\\nsecond\\nthird" in text
    assert "ValueError: inner\\nline" in text
    assert " WARNING steadyloop.audit: " in text


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        ([], {"WARNING", "ERROR"}),
        (["-v"], {"INFO", "WARNING", "ERROR"}),
        (["-vv"], {"DEBUG", "INFO", "WARNING", "ERROR"}),
        (["-q"], {"ERROR"}),
        (["-q", "-v"], {"ERROR"}),
    ],
)
def test_verbosity_flags_choose_the_levels_shown(
    args: list[str], shown: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of -v, -vv, -q shows exactly its levels of steadyloop's records, and the command undoes it afterwards."""
    logger = logging.getLogger("steadyloop.journal")
    before = (logging.getLogger("steadyloop").level, list(logging.getLogger("steadyloop").handlers))
    result = CliRunner().invoke(app, [*args, "journal", "--help"])
    assert result.exit_code == 0, result.output
    # The command has ended: nothing of its routing is left behind.
    after = (logging.getLogger("steadyloop").level, list(logging.getLogger("steadyloop").handlers))
    assert after == before
    undo = cli_logging(args.count("-v") + 2 * args.count("-vv"), "-q" in args)
    capsys.readouterr()
    try:
        for level in ("DEBUG", "INFO", "WARNING", "ERROR"):
            logger.log(getattr(logging, level), "event at %s", level)
    finally:
        undo()
    lines = capsys.readouterr().err.splitlines()
    assert {line.split(" ")[2] for line in lines} == shown, lines
    assert all(line.endswith(f"event at {line.split(' ')[2]}") for line in lines)


def test_a_retried_transaction_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """A retried SQL transaction logs one INFO record per retry, naming the attempt and the error."""
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise TimeoutError(f"refused {calls}")
        return "done"

    caplog.set_level(logging.INFO, logger="steadyloop.journal")
    policy = RetryPolicy(attempts=5, base_delay=0.001, max_delay=0.002)
    assert asyncio.run(retry_transaction(attempt, lambda _: True, policy)) == "done"
    retries = [r for r in caplog.records if r.name == "steadyloop.journal._sql_async"]
    assert [r.levelname for r in retries] == ["INFO", "INFO"]
    assert "attempt 1 of 5 failed (TimeoutError: refused 1)" in retries[0].getMessage()
    assert "attempt 2 of 5 failed (TimeoutError: refused 2)" in retries[1].getMessage()
