"""The package's structure, read from the source with `ast`: exports, private imports, circles.

Nothing here imports Steadyloop, so the rules hold whatever extras are installed.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Known exceptions, each named, so each test fails as soon as one is fixed (the entry is
# then stale) or a new one appears. src/steadyloop/replay/ and src/steadyloop/integrations/
# are being rebuilt under issue 21 (items 4 and 7); they are fixed there, not here.
KNOWN_PRIVATE_IMPORTS = frozenset(
    {
        *(
            ("steadyloop.replay._cases", name, "steadyloop.replay._harness")
            for name in (
                "AppendEvent",
                "Checkpoint",
                "CreateSession",
                "DeleteSession",
                "EditEvent",
                "FailSummary",
                "InjectFailure",
                "ListSessions",
                "RepeatEvent",
                "ResumeLoop",
                "RunLoop",
                "SearchMemory",
                "StoreMemory",
                "Summarize",
                "TextPartSpec",
                "ToolCallSpec",
            )
        ),
        ("steadyloop.replay._cases", "InjectFailure", "steadyloop.replay._journal_store"),
        ("steadyloop.replay._harness", "CLOCK_START", "steadyloop.replay"),
        ("steadyloop.replay._harness", "CLOCK_STEP", "steadyloop.replay"),
        ("steadyloop.replay._harness", "make_workdir", "steadyloop.replay._report"),
        ("steadyloop.replay._journal_store", "Crash", "steadyloop.replay._harness"),
        ("steadyloop.replay._journal_store", "InjectedDrop", "steadyloop.replay._harness"),
        (
            "steadyloop.integrations._openai_agents",
            "handoff_names",
            "steadyloop.testing._agents_crash",
        ),
        (
            "steadyloop.integrations._openai_agents",
            "without_handoffs",
            "steadyloop.testing._agents_crash",
        ),
    }
)
"""(private module, name missing from its ``__all__``, the module importing it)."""

KNOWN_UNEXPORTED_ERRORS = frozenset(
    {
        ("steadyloop.replay._harness", "NotCreated"),
        ("steadyloop.replay._journal_store", "InjectedDrop"),
    }
)
"""(module, error class) defined with a public name but exported by no ``__all__``."""

KNOWN_CYCLES = frozenset(
    {
        # load -> drive -> snapshot -> report is being made one-directional (issue 21, item 4).
        frozenset(
            {
                "steadyloop.replay._harness",
                "steadyloop.replay._journal_store",
                "steadyloop.replay._snapshot",
            }
        ),
    }
)
"""Each known import circle, as the set of modules it goes through."""


@dataclass(frozen=True)
class Module:
    """One module of the package, parsed."""

    name: str
    path: Path
    is_package: bool
    tree: ast.Module

    @property
    def private(self) -> bool:
        """Whether a part of its dotted name (after ``steadyloop``) starts with ``_``."""
        return any(p.startswith("_") and not p.startswith("__") for p in self.name.split("."))

    @property
    def exports(self) -> frozenset[str] | None:
        """Its ``__all__``, or ``None`` when it has none."""
        for node in self.tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return frozenset(ast.literal_eval(node.value))  # type: ignore[union-attr]
        return None

    def resolve(self, node: ast.ImportFrom) -> str:
        """The absolute name of the module a ``from … import`` reads from."""
        if not node.level:
            return node.module or ""
        base = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])


@cache
def modules() -> dict[str, Module]:
    """Every module under ``src/steadyloop``, by dotted name."""
    found: dict[str, Module] = {}
    for path in sorted((SRC / "steadyloop").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found[name] = Module(name, path, is_package, tree)
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import that runs: at module level or deferred into a function, not for typing only."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _type_checking(node.test):
            for other in node.orelse:
                yield from imports(ast.Module(body=[other], type_ignores=[]))
        else:
            yield from imports(node)


def import_graph() -> dict[str, set[str]]:
    """For each module, the package modules it imports (a ``from pkg import sub`` means ``sub``).

    Importing a submodule also runs its package's ``__init__``; that edge is left out, as
    every package imports its own modules and would otherwise close a circle with each.
    """
    mods = modules()
    graph: dict[str, set[str]] = {}
    for mod in mods.values():
        out: set[str] = set()
        for node in imports(mod.tree):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in mods}
                continue
            source = mod.resolve(node)
            for alias in node.names:
                if f"{source}.{alias.name}" in mods:
                    out.add(f"{source}.{alias.name}")
                elif source in mods:
                    out.add(source)
        out.discard(mod.name)
        graph[mod.name] = out
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    for root in sorted(graph):
        if root not in index:
            visit(root)
    return found


def test_the_cycle_finder_finds_a_circle_and_nothing_else() -> None:
    """A two-module circle and a three-module one are found; a chain and a diamond are not."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d", "e"}, "d": {"f"}, "e": {"f"}, "f": set()}
    graph |= {"x": {"y"}, "y": {"z"}, "z": {"x"}}
    assert cycles(graph) == {frozenset("ab"), frozenset("xyz")}


def test_deferred_imports_count_and_typing_only_ones_do_not() -> None:
    """An import inside a function is an edge; one under ``if TYPE_CHECKING:`` is not."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import typed_only\nelse:\n    import at_run_time\n"
        "def f():\n    from deferred import x\n"
    )
    names = {n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in imports(tree)}
    assert names == {"typing", "at_run_time", "deferred"}


def test_no_import_circles_among_steadyloop_modules() -> None:
    """No set of modules imports itself round in a circle, deferred imports included."""
    found = cycles(import_graph())
    assert sorted(map(sorted, found - KNOWN_CYCLES)) == [], "new import circles"
    assert sorted(map(sorted, KNOWN_CYCLES - found)) == [], "fixed: drop from KNOWN_CYCLES"


def private_imports_outside_all() -> set[tuple[str, str, str]]:
    """Each name imported from a private module that is not in that module's ``__all__``.

    Returns:
        (private module, name, importer) triples; names starting with ``_`` are private
        and left out.
    """
    mods = modules()
    found: set[tuple[str, str, str]] = set()
    for mod in mods.values():
        for node in imports(mod.tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = mods.get(mod.resolve(node))
            if source is None or not source.private:
                continue
            exports = source.exports or frozenset()
            for alias in node.names:
                name = alias.name
                if name.startswith("_") or f"{source.name}.{name}" in mods or name in exports:
                    continue
                found.add((source.name, name, mod.name))
    return found


def test_every_name_imported_from_a_private_module_is_in_its_all() -> None:
    """A name another module imports from a private module is in that module's ``__all__``."""
    found = private_imports_outside_all()
    assert sorted(found - KNOWN_PRIVATE_IMPORTS) == [], "add them to __all__, or make them _private"
    assert sorted(KNOWN_PRIVATE_IMPORTS - found) == [], "fixed: drop from KNOWN_PRIVATE_IMPORTS"


def error_classes() -> dict[tuple[str, str], ast.ClassDef]:
    """Every class derived (by the names of its bases) from `SteadyloopError`, by (module, name)."""
    classes = {
        (mod.name, node.name): node
        for mod in modules().values()
        for node in mod.tree.body
        if isinstance(node, ast.ClassDef)
    }
    errors = {"SteadyloopError"}
    grew = True
    while grew:
        grew = False
        for (_, name), node in classes.items():
            bases = {
                b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
            }
            if name not in errors and bases & errors:
                errors.add(name)
                grew = True
    assert not errors & set(dir(builtins)), "an error class shadows a built-in"
    return {key: node for key, node in classes.items() if key[1] in errors}


def package_of(module: str) -> str:
    """The nearest public package holding a module: what users import it from."""
    mods = modules()
    parts = module.split(".")
    while len(parts) > 1 and (not mods[".".join(parts)].is_package or parts[-1].startswith("_")):
        parts.pop()
    return ".".join(parts)


def unexported_errors() -> set[tuple[str, str]]:
    """(module, error) for each public error missing from its module's or package's ``__all__``."""
    mods = modules()
    missing: set[tuple[str, str]] = set()
    for module, name in error_classes():
        if name.startswith("_"):
            continue
        for where in {module, package_of(module)}:
            if name not in (mods[where].exports or frozenset()):
                missing.add((module, name))
    return missing


def test_every_public_error_is_in_its_package_all() -> None:
    """Each public `SteadyloopError` class is in its own module's ``__all__`` and its package's."""
    assert ("steadyloop._errors", "ExecutorUnavailable") in error_classes()
    assert package_of("steadyloop._errors") == "steadyloop"
    assert package_of("steadyloop.replay.stores._adk") == "steadyloop.replay.stores"
    found = unexported_errors()
    assert sorted(found - KNOWN_UNEXPORTED_ERRORS) == [], "export them, or make them _private"
    assert sorted(KNOWN_UNEXPORTED_ERRORS - found) == [], "fixed: drop from KNOWN_UNEXPORTED_ERRORS"
