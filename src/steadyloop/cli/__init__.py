"""The ``steadyloop`` command line.

Each command group lives in its own private module, imported only when a command of
it runs (or its help is asked for): ``steadyloop --help`` imports none of them, and
``steadyloop run`` imports the loop and the journal but not the audit loop or
replay-diff.
"""

from __future__ import annotations

import importlib
import sys
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

__all__ = ["app", "main"]

_COMMANDS: dict[str, tuple[str, str, str]] = {
    "journal": (
        "steadyloop.cli._journal",
        "journal_app",
        "Inspect a journal: show its records, check its integrity, copy, prune, erase.",
    ),
    "run": (
        "steadyloop.cli._runs",
        "run_command",
        "Start a run of AGENT on INPUT; the same --run-id again continues it.",
    ),
    "resume": (
        "steadyloop.cli._runs",
        "resume_command",
        "Continue a run from its journal; finished effects are not repeated.",
    ),
    "runs": (
        "steadyloop.cli._runs",
        "runs_app",
        "Inspect runs: list them, show one, resolve or cancel it.",
    ),
    "replay": (
        "steadyloop.cli._replay",
        "replay_app",
        "Run replay cases on every backend and diff what each one stored.",
    ),
    "audit": (
        "steadyloop.cli._audit",
        "audit_app",
        "The audit loop: submit tasks, run workers, show status and trails.",
    ),
}
"""Each command: the module and attribute that define it, and its one-line help.

The help is repeated here so that ``steadyloop --help`` can list the commands without
importing them; a test holds it equal to the command's own.
"""


def _load_command(name: str) -> Any:
    """Import the click command of one top-level command (see ``_COMMANDS``)."""
    module_name, attr, _ = _COMMANDS[name]
    obj = getattr(importlib.import_module(module_name), attr)
    if not isinstance(obj, typer.Typer):  # a command function
        single = typer.Typer(rich_markup_mode="rich")
        single.command(name)(obj)
        obj = single
    # As a group of the root app it never offered shell completion of its own.
    obj._add_completion = False
    command = typer.main.get_command(obj)
    command.name = name
    return command


class _LazyGroup(TyperGroup):
    """The root group: its commands are imported when first looked up.

    Only the root's own help lists them from ``_COMMANDS`` without importing.
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*(n for n in self.commands if n not in _COMMANDS), *_COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in _COMMANDS:
            return command
        if self._listing:
            return TyperCommand(name=cmd_name, help=_COMMANDS[cmd_name][2])
        command = _load_command(cmd_name)
        self.add_command(command, cmd_name)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="steadyloop",
    help="Keep LLM-agent runs trustworthy: inspect journals, run and resume agents.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    cls=_LazyGroup,
)


@app.callback()
def _root(
    ctx: typer.Context,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            help="Log more: -v adds retries, reconnects and fallbacks (INFO), -vv DEBUG.",
        ),
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log errors only.")] = False,
) -> None:
    """Keep LLM-agent runs trustworthy: inspect journals, run and resume agents."""
    from steadyloop._logging import cli_logging

    ctx.call_on_close(cli_logging(verbose, quiet))


def main() -> None:
    """Entry point of the ``steadyloop`` console script.

    Ctrl-C before a command has installed its own handling (while Python imports an
    agent, say) ends the command with exit code 130 and one line, not a traceback.
    """
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
