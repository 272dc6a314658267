"""The CLI imports only what a command uses, and lists every command without importing it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main

from steadyloop.cli import _COMMANDS, _load_command, app

PROBE = """
import json, sys
from steadyloop.cli import main
sys.argv = ["steadyloop", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("steadyloop", "pydantic")))))
"""


def loaded_after(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(args))],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_help_imports_no_command_module() -> None:
    """``steadyloop --help`` lists the commands without importing any layer."""
    loaded = loaded_after("--help")
    assert not {m for m in loaded if m.startswith("steadyloop.cli._")}
    for layer in ("audit", "replay", "loop", "journal", "sessions"):
        assert f"steadyloop.{layer}" not in loaded
    assert "pydantic" not in loaded


def test_a_run_command_does_not_import_the_audit_loop_or_replay() -> None:
    """``steadyloop runs list`` needs the loop and the journal, nothing else."""
    loaded = loaded_after("runs", "list", "-j", "memory://")
    assert "steadyloop.loop" in loaded and "steadyloop.journal" in loaded
    assert "steadyloop.audit" not in loaded and "steadyloop.replay" not in loaded


@pytest.mark.parametrize("name", list(_COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    """The one-line help shown by --help is the first line of the command's own help."""
    command = _load_command(name)
    own = (command.help or "").strip().splitlines()[0]
    assert _COMMANDS[name][2] == own


def test_every_command_is_reachable_through_the_app() -> None:
    """The root group hands out the real commands, for docs and completion alike."""
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="steadyloop")  # type: ignore[attr-defined]
    names = root.list_commands(ctx)  # type: ignore[attr-defined]
    assert names == list(_COMMANDS)
    for name in names:
        command = root.get_command(ctx, name)  # type: ignore[attr-defined]
        assert command.params or getattr(command, "commands", None), name
