"""The ``steadyloop`` command line.

Each command group lives in its own private module and is registered here.
"""

from __future__ import annotations

import sys

import typer

from steadyloop.cli._audit import audit_app
from steadyloop.cli._journal import journal_app
from steadyloop.cli._replay import replay_app
from steadyloop.cli._runs import register as _register_runs

__all__ = ["app", "main"]

app = typer.Typer(
    name="steadyloop",
    help="Keep LLM-agent runs trustworthy: inspect journals, run and resume agents.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)
app.add_typer(journal_app, name="journal")
_register_runs(app)
app.add_typer(replay_app, name="replay")
app.add_typer(audit_app, name="audit")


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
