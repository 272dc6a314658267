"""Framework warnings during a replay: WARNING records of one logger, kept for the report.

A framework under test may log (trpc-agent-py prints a warning to standard output for
every append whose time lies in the past, which every case time does) or call
`warnings.warn`. While a replay runs, both become WARNING records of
[`FRAMEWORK_LOGGER`][steadyloop.replay.FRAMEWORK_LOGGER], one per warning, and each is
kept for the report's `warnings` section. The framework's own handlers are set aside
for that time, so nothing reaches the terminal unless a handler of that logger (the
CLI's `-v`) or of the root logger shows it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FRAMEWORK_LOGGER", "FRAMEWORK_LOGGER_NAMES", "framework_warnings"]

FRAMEWORK_LOGGER = "steadyloop.replay.frameworks"
"""The logger whose WARNING records are the frameworks' warnings during a replay."""

FRAMEWORK_LOGGER_NAMES: tuple[str, ...] = (
    "trpc_agent_sdk",
    "google_adk",
    "google.adk",
    "openai.agents",
    "agents",
)
"""The frameworks' own loggers whose warnings a replay takes over."""

_log = logging.getLogger(FRAMEWORK_LOGGER)
# A library's logger: without it, Python's last-resort handler would print every
# framework warning to stderr in a program that configured no logging (a notebook).
_log.addHandler(logging.NullHandler())


class _Forward(logging.Handler):
    """Re-emit a framework's record (WARNING and above) on the one logger, and keep it."""

    def __init__(self, sink: list[dict[str, Any]]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception as exc:  # a framework's malformed record must not stop the run
            message = f"{record.msg} (its arguments did not format: {type(exc).__name__})"
        _keep(self.sink, record.name, message)


def _keep(sink: list[dict[str, Any]], source: str, message: str) -> None:
    line = " ".join(message.split())
    sink.append({"source": source, "message": line})
    _log.warning("%s: %s", source, line)


@contextmanager
def framework_warnings(sink: list[dict[str, Any]]) -> Iterator[None]:
    """While open, turn framework warnings into records of the one logger; collect them.

    Each warning is appended to `sink` as `{"source", "message"}`: the framework's
    logger name, or the warning's category for `warnings.warn`. The filters of the
    `warnings` module are left as they are (a test that turns warnings into errors
    still gets its error); only how a shown warning is shown changes.
    """
    forward = _Forward(sink)
    saved = []
    for name in FRAMEWORK_LOGGER_NAMES:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(forward)
        logger.propagate = False

    def show(  # noqa: PLR0917 (the signature warnings.showwarning has)
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        _keep(sink, category.__name__, f"{message} ({filename}:{lineno})")

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            yield
    finally:
        for logger, handlers, propagate in saved:
            logger.removeHandler(forward)
            for handler in handlers:
                logger.addHandler(handler)
            logger.propagate = propagate
