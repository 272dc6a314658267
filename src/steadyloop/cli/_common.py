"""Helpers shared by the command groups: opening journals, reporting errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from steadyloop._errors import BackendUnavailable, SteadyloopError, UnknownBackend

__all__ = ["EXIT_PROBLEM", "EXIT_UNUSABLE", "console", "err_console", "run_async"]

T = TypeVar("T")

EXIT_PROBLEM = 1
"""Exit code when the command ran and found a problem (corruption, a difference)."""

EXIT_UNUSABLE = 2
"""Exit code when the command could not run: bad input or an unreachable backend."""

console = Console(highlight=False, soft_wrap=False, emoji=False)
err_console = Console(stderr=True, highlight=False, emoji=False)


def run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run a coroutine function, turning Steadyloop errors into a clean exit.

    Bad input and unreachable backends exit with `EXIT_UNUSABLE`; any other
    Steadyloop error exits with `EXIT_PROBLEM`. No traceback is shown for them.
    """
    try:
        return asyncio.run(fn(*args))  # type: ignore[arg-type]
    except (UnknownBackend, BackendUnavailable) as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    except SteadyloopError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_PROBLEM) from None
