"""The command line's log output: one event per line on standard error.

Every module logs to its own logger (``logging.getLogger(__name__)``), all under
``steadyloop``. A library leaves the output to its application; the ``steadyloop``
command line is one, and routes ``steadyloop``'s records through `cli_logging`:
WARNING and above by default, INFO (retries, reconnects, fallbacks) with ``-v``,
DEBUG with ``-vv``, errors only with ``-q``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TextIO

__all__ = ["OneLineFormatter", "cli_logging"]


class OneLineFormatter(logging.Formatter):
    r"""Formats a record as one line: time, level, logger and message.

    A line break in the message, or the traceback of ``exc_info``, is written as the two
    characters ``\n``, so a log read line by line (a worker's, say) has exactly one line
    per event.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """Return ``record`` formatted on one line."""
        text = super().format(record)
        return text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler writing to whatever ``sys.stderr`` is at the time of each record."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always the current sys.stderr


def cli_logging(verbose: int, quiet: bool) -> Callable[[], None]:
    """Route ``steadyloop``'s log records to standard error, one line each.

    Args:
        verbose: How many ``-v`` were given: 1 shows INFO, 2 or more DEBUG.
        quiet: ``-q``: show errors only (wins over ``verbose``).

    Returns:
        A function that undoes it: removes the handler and restores the logger's level.
    """
    if quiet:
        level = logging.ERROR
    elif verbose >= 2:
        level = logging.DEBUG
    elif verbose == 1:
        level = logging.INFO
    else:
        level = logging.WARNING
    logger = logging.getLogger("steadyloop")
    handler = _Stderr()
    handler.setLevel(level)
    handler.setFormatter(OneLineFormatter())
    before = logger.level
    logger.addHandler(handler)
    if level < logging.WARNING:
        logger.setLevel(level)

    def undo() -> None:
        logger.removeHandler(handler)
        logger.setLevel(before)

    return undo
