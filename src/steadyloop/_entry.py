"""The ``steadyloop`` console script: nothing imported before Ctrl-C is handled.

The command line itself (typer, rich, the command modules) is imported inside
``main``, so a Ctrl-C while Python is still loading it ends the command with exit
code 130 and one line, not a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Run the ``steadyloop`` command line."""
    try:
        from steadyloop.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
