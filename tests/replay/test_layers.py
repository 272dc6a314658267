"""Replay flows one way: load → drive → snapshot → diff → report, no module calling back up.

The replay package's modules are stacked in `LAYERS`, top first. A module may import
(at module level or deferred into a function) only modules below it, read from the source
with `ast`; and while a replay runs, no function of one of them calls a function of a
module above it, seen with a profiler. A new module must be given its place here.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import steadyloop.replay
from steadyloop.replay import bundled_cases, load_cases, replay

PACKAGE = "steadyloop.replay"
SOURCE = Path(steadyloop.replay.__file__).parent

LAYERS: tuple[str, ...] = (
    "steadyloop.replay",  # the curated __init__: names only, nothing below imports it
    "_replay",  # the replay() function: runs the stages in order
    "_report",  # report: counts, JSON, hash (takes the diff stage's CaseReport)
    "_compare",  # diff: each snapshot against the expectation and the reference
    "_harness",  # drive: runs a case's operations on a store, reads back a Snapshot
    "_saver",  # drive, checkpointer ops: runs the saver_* operations, reads threads back
    "_load",  # load: a selection (names, URLs, stores) becomes stores under test
    "_capabilities",  # what a case needs of a store
    "_schema",  # the bundled cases and packs, the JSON Schemas
    "_cases",  # the case language and its loader
    "_saver_cases",  # the case language's checkpointer operations
    "_diff",  # the diff engine
    "_normalise",  # representation-only normalisation
    "_snapshot",  # the typed Snapshot, its sections, the read-back through the protocol
    "_faults",  # a planted faulty store, wrapping any store
    "stores",  # the framework stores, reached through entry points
    "_journal_store",  # Steadyloop's own store under test, on a journal
    "_backends",  # how that store opens its journal (the one URL parser's result)
    "_store",  # the store protocol, capabilities, store URLs
    "_warnings",  # framework warnings caught during a run
)
"""The replay package's modules, top first: each may use only the ones after it."""


def layer(module: str) -> int:
    """The index in `LAYERS` of a module of the replay package (a framework store is `stores`)."""
    if module == PACKAGE:
        return 0
    first = module.removeprefix(PACKAGE + ".").split(".")[0]
    return LAYERS.index(first)


def package_modules() -> dict[str, Path]:
    """Every module of the replay package, by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([PACKAGE, *parts])] = path
    return found


def _typing_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(tree: ast.AST, name: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """`(line, module)` of each replay module an import that runs reads from."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _typing_only(node):
            for other in node.orelse:
                yield from imported(other, name, is_package)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            if source == PACKAGE or source.startswith(PACKAGE + "."):
                modules = package_modules()
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    yield node.lineno, sub if sub in modules else source
        else:
            yield from imported(node, name, is_package)


def upward_imports(name: str, source: str, is_package: bool) -> list[str]:
    """Each import of `source` (module `name`) that reads from a layer above its own."""
    here = layer(name)
    return [
        f"{name}:{line} imports {module}"
        for line, module in imported(ast.parse(source), name, is_package)
        if layer(module) < here
    ]


def test_every_module_of_the_package_has_a_layer() -> None:
    """Each module of the replay package is placed in `LAYERS`, so a new one must be given a place."""
    unplaced = []
    for name in package_modules():
        try:
            layer(name)
        except ValueError:
            unplaced.append(name)
    assert unplaced == []


def test_no_module_imports_a_module_above_it() -> None:
    """No replay module imports one above it in `LAYERS`, deferred imports included: the stages flow one way."""
    found = []
    for name, path in package_modules().items():
        if name == PACKAGE:
            continue
        text = path.read_text(encoding="utf-8")
        found += upward_imports(name, text, path.name == "__init__.py")
    assert found == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("steadyloop.replay._snapshot", "from steadyloop.replay._harness import CaseRun\n"),
        ("steadyloop.replay._journal_store", "def f():\n    from .  import _load\n"),
        ("steadyloop.replay._harness", "from steadyloop.replay import replay\n"),
        ("steadyloop.replay._cases", "import steadyloop.replay._report\n"),
        ("steadyloop.replay.stores._adk", "from steadyloop.replay._load import probe\n"),
    ],
)
def test_the_checker_finds_a_call_back_up(module: str, source: str) -> None:
    """A back-import (top level, deferred, relative, or of the package itself) is found."""
    assert upward_imports(module, source, False) != []


def test_the_checker_lets_a_module_import_below_it() -> None:
    """Imports of lower layers, of framework stores among themselves and under TYPE_CHECKING pass."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from steadyloop.replay._store import SessionStore\n"
        "from steadyloop.replay.stores._common import describe\n"
        "if TYPE_CHECKING:\n    from steadyloop.replay._harness import CaseRun\n"
    )
    assert upward_imports("steadyloop.replay.stores._adk", source, False) == []


def _module(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    name = frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) and name.startswith(PACKAGE) else None


async def test_a_backends_url_goes_down_the_layers_without_returning(tmp_path: Path) -> None:
    """While a replay runs on `--backends`-style URLs, no replay function calls one in a module above its own."""
    cases = load_cases([bundled_cases() / "single_turn.jsonl"])
    selection = [f"sqlite:///{tmp_path / 'under-test.db'}", "ref=sqlite", "jsonl"]
    calls: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee, caller = _module(frame), _module(frame.f_back)
        if callee is not None and caller is not None and callee != caller:
            calls.add((caller, callee))

    sys.setprofile(profile)
    try:
        report = await replay(cases, selection, workdir=tmp_path)
    finally:
        sys.setprofile(None)
    assert report.ok
    entered = {callee for _, callee in calls}
    stages = {"_load", "_harness", "_snapshot", "_compare", "_report", "_backends"}
    assert {f"{PACKAGE}.{s}" for s in stages} <= entered, "the replay did not run through"
    upward = sorted(f"{a} -> {b}" for a, b in calls if layer(b) < layer(a))
    assert upward == [], "a function called one in a module above its own"


def test_the_snapshot_sections_are_listed_once() -> None:
    """The case loader, the normaliser and the report take the snapshot's sections from `Snapshot`'s fields."""
    import dataclasses

    from steadyloop.replay import DOMAINS, REPORT_DOMAINS, SECTIONS, Snapshot, report_schema
    from steadyloop.replay._compare import SESSION_PARTS
    from steadyloop.replay._normalise import _DOMAINS

    fields = tuple(f.name for f in dataclasses.fields(Snapshot))
    assert SECTIONS == fields == DOMAINS
    assert frozenset(fields) == _DOMAINS
    assert tuple(Snapshot().to_dict()) == fields
    assert (fields[0], *SESSION_PARTS, *fields[1:]) == REPORT_DOMAINS
    schema = report_schema()
    enums = [
        node["enum"]
        for node in _walk(schema)
        if isinstance(node, dict) and "enum" in node and "checkpoints" in node["enum"]
    ]
    assert enums == [list(REPORT_DOMAINS)]


def _walk(node: Any) -> Iterator[Any]:
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        yield from _walk(child)


def test_a_snapshot_round_trips_and_refuses_an_unknown_section() -> None:
    """`Snapshot.from_dict` keeps every section it is given, fills the rest empty, and names a key that is no section."""
    from steadyloop.replay import Snapshot

    body = {"sessions": {"s": {"events": []}}, "errors": {"3": {"op": "x", "error": "E"}}}
    snapshot = Snapshot.from_dict(body)
    assert snapshot.sessions == body["sessions"] and snapshot.errors == body["errors"]
    assert Snapshot.from_dict(snapshot.to_dict()) == snapshot
    assert snapshot.to_dict()["queries"] == {}
    with pytest.raises(ValueError, match="not snapshot sections: sesions"):
        Snapshot.from_dict({"sesions": {}})
