"""Helpers shared by the command groups: opening journals, reporting errors."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from steadyloop._errors import BackendUnavailable, MissingExtra, SteadyloopError, UnknownBackend

__all__ = [
    "EXIT_DECIDE",
    "EXIT_PROBLEM",
    "EXIT_UNUSABLE",
    "console",
    "err_console",
    "exit_for_signal",
    "json_line",
    "printable",
    "run_async",
]

T = TypeVar("T")

EXIT_PROBLEM = 1
"""Exit code when the command ran and found a problem (corruption, a difference)."""

EXIT_UNUSABLE = 2
"""Exit code when the command could not run: bad input or an unreachable backend."""

EXIT_DECIDE = 3
"""Exit code when a run waits for a person's decision (``resume_state_unknown``)."""


def exit_for_signal(signum: int) -> int:
    """The exit code of a command stopped by a signal: 128 + its number (130 for Ctrl-C)."""
    return 128 + signum


console = Console(highlight=False, soft_wrap=False, emoji=False)
# Soft wrap: an error is one line however narrow the terminal (or log) is; Rich would
# otherwise break it at 80 columns whenever stderr is not a terminal.
err_console = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)


# C0 controls (newline and tab too: a field is one line), DEL, C1, the Unicode line and
# paragraph separators, and the bidirectional embeddings, overrides and isolates (which
# reorder what follows them on the line, so a field could seem to hold other text).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, *, lines: bool = False) -> str:
    r"""``str(value)`` safe to show on a terminal, one line: control characters made visible.

    Task ids, specs, findings, agent output and every other text from data may hold any
    Unicode. Shown raw, an escape sequence would drive the operator's terminal and a
    newline would start a line that looks like output of the command (a forged status
    row). Each C0 control (newline and tab too), DEL, C1 control, U+2028, U+2029 and
    bidirectional control is written as its escape instead: ``\n``, ``\r``, ``\t``,
    ``\x1b``, ``\x85``, ``\u2028``. Other text, a backslash included, is unchanged
    (paths stay readable), so ``--json`` is the form to read when the exact value matters.

    The result is plain text: pass it to ``rich.text.Text``, or through
    ``rich.markup.escape`` when it goes into a markup string.

    Args:
        value: The text (or any object, shown as ``str(value)``).
        lines: Keep each newline (``\n``) as a line break, for text shown as a block
            of lines (an agent's output, a finding's evidence); every other control
            is still escaped.

    Returns:
        The text with every such character replaced by its escape.
    """
    text = str(value)
    if lines:
        return "\n".join(_UNPRINTABLE.sub(_visible, line) for line in text.split("\n"))
    return _UNPRINTABLE.sub(_visible, text)


# JSON leaves these raw inside strings (ensure_ascii=False), yet str.splitlines and
# terminals treat them as line breaks or controls: written as \uXXXX escapes instead.
_JSON_RAW = re.compile("[\x7f-\x9f\u2028\u2029]")


def json_line(value: Any, *, encode: Callable[[Any], str] | None = None) -> str:
    r"""``value`` as one line of JSON that every line splitter sees as one line.

    Non-ASCII text stays as it is, except DEL, the C1 controls (U+0085 NEXT LINE among
    them), U+2028 and U+2029: ``str.splitlines`` splits at U+0085, U+2028 and U+2029,
    and a terminal may act on C1 controls. They are written as ``\uXXXX`` escapes,
    which every JSON reader turns back into the same characters.

    Args:
        value: What to encode.
        encode: The encoder, for a form of its own (``canonical_json``); by default
            ``json.dumps`` with non-ASCII text kept.

    Returns:
        The JSON text, without a newline.
    """
    text = encode(value) if encode is not None else json.dumps(value, ensure_ascii=False)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run a coroutine function, turning Steadyloop errors into a clean exit.

    Bad input, unreachable backends and missing extras exit with `EXIT_UNUSABLE`; any other
    Steadyloop error exits with `EXIT_PROBLEM`. No traceback is shown for them.
    """
    try:
        return asyncio.run(fn(*args))  # type: ignore[arg-type]
    except (UnknownBackend, MissingExtra, BackendUnavailable) as exc:
        err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    except SteadyloopError as exc:
        err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
        raise typer.Exit(EXIT_PROBLEM) from None
