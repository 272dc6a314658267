"""MkDocs hook: list the journal's record kinds from the code, at build time.

A page holds the marker line ``<!-- record-kinds steadyloop -->``; the hook replaces it
with every record kind the package defines, read from the source with :mod:`ast` (no
import, so a module that cannot be imported yet still shows its kinds). A kind is found
when it is

* a module-level string constant whose name ends in ``_KIND`` or starts with ``KIND_``
  (``INTENT_KIND = "effect.intent"``, ``KIND_EVENT = "session.event"``), or
* a member of a module-level tuple or list whose name ends in ``RECORD_KINDS`` (the
  registries ``steadyloop.sessions.RECORD_KINDS`` and ``steadyloop.loop.RUN_RECORD_KINDS``), or
* a string member of a class (an enum) whose docstring's first paragraph speaks of
  "record kinds" (``steadyloop.audit.TaskEvent``).

Each kind is described from the docstrings: first an entry of the form
````` ``kind`` (payload fields) `````, followed by an indented description, in the
docstring of the module holding its registry (or its constant); failing that, the
attribute docstring under its constant. Kinds are grouped by registry, in the
registry's order. Headings get ASCII ids (``kind-session-event``) shared by every
language.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.record_kinds")

MARKER = re.compile(r"^<!--\s*record-kinds\s+(?P<package>[\w.]+)\s*-->\s*$", re.M)
CONSTANT_NAME = re.compile(r"^(?:KIND_\w+|\w+_KIND)$")
REGISTRY_NAME = re.compile(r"^\w*RECORD_KINDS$")
CLASS_DOC = re.compile(r"\brecord kinds?\b", re.I)

LABELS = {
    "en": {
        "constant": "Constant",
        "registry": "Listed in",
        "payload": "Payload",
        "kind": "kind",
        "meaning": "meaning",
        "ungrouped": "Kinds outside a registry",
        "none": "no description in the code",
    },
    "zh": {
        "constant": "常量",
        "registry": "登记于",
        "payload": "载荷",
        "kind": "kind",
        "meaning": "含义",
        "ungrouped": "未登记的 kind",
        "none": "代码里没有说明",
    },
}


@dataclass
class Kind:
    """One record kind, as the code defines it."""

    value: str
    constants: list[str] = field(default_factory=list)
    registries: list[str] = field(default_factory=list)
    fields: str = ""
    description: str = ""


@dataclass
class _Module:
    name: str
    docstring: str
    constants: dict[str, tuple[str, str]]  # name -> (value, attribute docstring)
    imports: dict[str, tuple[str, str]]  # local name -> (module, name)
    registries: dict[str, list[ast.expr]]
    exports: set[str]
    classes: dict[str, tuple[list[tuple[str, str]], str]] = field(default_factory=dict)


def package_dir(package: str) -> Path:
    """The source folder of a package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package {package!r}")
    return Path(next(iter(spec.submodule_search_locations)))


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    # ``module`` is a module, so one dot means its package.
    base = base[: len(base) - node.level]
    return ".".join([*base, *([node.module] if node.module else [])])


def _scan(package: str, root: Path, path: Path) -> _Module:
    name = _module_name(package, root, path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    constants: dict[str, tuple[str, str]] = {}
    imports: dict[str, tuple[str, str]] = {}
    registries: dict[str, list[ast.expr]] = {}
    exports: set[str] = set()
    body = tree.body
    is_package = path.name == "__init__.py"
    classes: dict[str, tuple[list[tuple[str, str]], str]] = {}
    for i, stmt in enumerate(body):
        if isinstance(stmt, ast.ClassDef):
            doc = ast.get_docstring(stmt) or ""
            if CLASS_DOC.search(doc.split("\n\n", 1)[0]):
                members = [
                    (item.targets[0].id, item.value.value)
                    for item in stmt.body
                    if isinstance(item, ast.Assign)
                    and len(item.targets) == 1
                    and isinstance(item.targets[0], ast.Name)
                    and isinstance(item.value, ast.Constant)
                    and isinstance(item.value.value, str)
                ]
                classes[stmt.name] = (members, doc.split("\n\n", 1)[0])
            continue
        if isinstance(stmt, ast.ImportFrom):
            source = _resolve_from(name + (".__init__" if is_package else ""), stmt)
            for alias in stmt.names:
                imports[alias.asname or alias.name] = (source, alias.name)
            continue
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if not isinstance(target, ast.Name) or value is None:
            continue
        if target.id == "__all__" and isinstance(value, ast.List | ast.Tuple):
            exports |= {
                e.value
                for e in value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            doc = ""
            following = body[i + 1] if i + 1 < len(body) else None
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                doc = following.value.value
            constants[target.id] = (value.value, doc)
        elif REGISTRY_NAME.match(target.id) and isinstance(value, ast.Tuple | ast.List):
            registries[target.id] = list(value.elts)
    return _Module(
        name=name,
        docstring=ast.get_docstring(tree) or "",
        constants=constants,
        imports=imports,
        registries=registries,
        exports=exports,
        classes=classes,
    )


_ENTRY = re.compile(r"^``(?P<kind>[^`\s]+)``(?P<rest>.*)$")


def docstring_entries(docstring: str) -> dict[str, tuple[str, str]]:
    """Entries ````` ``kind`` (fields) ````` + indented description of a docstring.

    Returns:
        For each kind, its payload fields and its description, both as Markdown.
    """
    entries: dict[str, tuple[str, str]] = {}
    lines = docstring.splitlines()
    i = 0
    while i < len(lines):
        match = _ENTRY.match(lines[i])
        if not match:
            i += 1
            continue
        text = [match["rest"].strip()]
        i += 1
        while i < len(lines) and lines[i].startswith((" ", "\t")) and lines[i].strip():
            text.append(lines[i].strip())
            i += 1
        joined = " ".join(t for t in text if t)
        fields, description = "", joined
        if joined.startswith("("):
            depth = 0
            for pos, ch in enumerate(joined):
                depth += {"(": 1, ")": -1}.get(ch, 0)
                if depth == 0:
                    fields, description = joined[1:pos], joined[pos + 1 :].strip()
                    break
        entries[match["kind"]] = (rst_to_markdown(fields), rst_to_markdown(description))
    return entries


def rst_to_markdown(text: str) -> str:
    """The bits of reStructuredText docstrings use, as Markdown."""
    text = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", text)
    text = text.replace("``", "`")
    return re.sub(r"\s+", " ", text).strip()


def _public(modules: dict[str, _Module], module: str, name: str) -> str:
    """The public dotted path of ``module.name``: a private module's package, if it exports it."""
    path = module
    while "." in path and path.rsplit(".", 1)[1].startswith("_"):
        parent = path.rsplit(".", 1)[0]
        if parent not in modules or name not in modules[parent].exports:
            break
        path = parent
    return f"{path}.{name}"


def _lookup(
    modules: dict[str, _Module], module: str, name: str, seen: int = 0
) -> tuple[str, str, str] | None:
    """Follow imports to the module defining a constant: (module, value, docstring)."""
    mod = modules.get(module)
    if mod is None or seen > 10:
        return None
    if name in mod.constants:
        value, doc = mod.constants[name]
        return module, value, doc
    if name in mod.imports:
        source, original = mod.imports[name]
        return _lookup(modules, source, original, seen + 1)
    return None


def collect(package: str = "steadyloop", root: Path | None = None) -> dict[str, list[Kind]]:
    """Every record kind of a package, grouped by the registry listing it.

    Returns:
        Registry path (``steadyloop.loop.RUN_RECORD_KINDS``) -> kinds in its order;
        kinds in no registry come last, under the key ``""``.
    """
    root = root or package_dir(package)
    modules: dict[str, _Module] = {}
    for path in sorted(root.rglob("*.py")):
        try:
            mod = _scan(package, root, path)
        except SyntaxError as exc:  # a file mid-edit must not hide the others
            log.warning("record kinds: cannot parse %s: %s", path, exc)
            continue
        modules[mod.name] = mod
    kinds: dict[str, Kind] = {}
    groups: dict[str, list[Kind]] = {}
    describers: dict[str, list[str]] = {}  # kind -> modules whose docstrings may describe it

    def kind_for(value: str) -> Kind:
        return kinds.setdefault(value, Kind(value))

    for mod in modules.values():
        for reg_name, elements in mod.registries.items():
            registry = _public(modules, mod.name, reg_name)
            members = groups.setdefault(registry, [])
            for element in elements:
                found: tuple[str, str, str] | None = None
                constant = ""
                if isinstance(element, ast.Name):
                    found = _lookup(modules, mod.name, element.id)
                    constant = element.id
                elif isinstance(element, ast.Constant) and isinstance(element.value, str):
                    found = (mod.name, element.value, "")
                if found is None:
                    continue
                where, value, _ = found
                kind = kind_for(value)
                if constant:
                    public = _public(modules, where, constant)
                    if public not in kind.constants:
                        kind.constants.append(public)
                if registry not in kind.registries:
                    kind.registries.append(registry)
                    members.append(kind)
                describers.setdefault(value, []).extend([mod.name, where])
    for mod in modules.values():
        for class_name, (class_members, doc) in mod.classes.items():
            registry = _public(modules, mod.name, class_name)
            group = groups.setdefault(registry, [])
            for member, value in class_members:
                kind = kind_for(value)
                kind.constants.append(f"{registry}.{member}")
                if registry not in kind.registries:
                    kind.registries.append(registry)
                    group.append(kind)
                if not kind.description:
                    kind.description = rst_to_markdown(doc)
    for mod in modules.values():
        for name, (value, _doc) in mod.constants.items():
            if CONSTANT_NAME.match(name):
                kind = kind_for(value)
                public = _public(modules, mod.name, name)
                if public not in kind.constants:
                    kind.constants.append(public)
                describers.setdefault(value, []).append(mod.name)
    for value, kind in kinds.items():
        for module in describers.get(value, []):
            entry = docstring_entries(modules[module].docstring).get(value)
            if entry:
                kind.fields, kind.description = entry
                break
        if not kind.description:
            for module in describers.get(value, []):
                for _name, (v, doc) in modules[module].constants.items():
                    if v == value and doc:
                        kind.description = rst_to_markdown(doc)
                        break
                if kind.description:
                    break
    grouped = {k for members in groups.values() for k in (m.value for m in members)}
    loose = [k for v, k in sorted(kinds.items()) if v not in grouped]
    result = {registry: members for registry, members in sorted(groups.items()) if members}
    if loose:
        result[""] = loose
    return result


def anchor(text: str, prefix: str) -> str:
    """An ASCII heading id."""
    return prefix + re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def render(groups: dict[str, list[Kind]], lang: str = "en") -> str:
    """Markdown for the kinds: a section per registry, a table, then each kind."""
    t = LABELS[lang]
    out: list[str] = []
    for registry, members in groups.items():
        title = f"`{registry}`" if registry else t["ungrouped"]
        out += [f"### {title} {{#{anchor(registry or 'ungrouped', 'kinds-')}}}", ""]
        out += [f"| {t['kind']} | {t['constant']} | {t['payload']} |", "|---|---|---|"]
        for kind in members:
            link = f"[`{kind.value}`](#{anchor(kind.value, 'kind-')})"
            constants = ", ".join(f"`{c}`" for c in kind.constants) or "–"
            out.append(f"| {link} | {constants} | {kind.fields or '–'} |")
        out.append("")
        for kind in members:
            out += [f"#### `{kind.value}` {{#{anchor(kind.value, 'kind-')}}}", ""]
            if kind.constants:
                out.append(f"**{t['constant']}:** " + ", ".join(f"`{c}`" for c in kind.constants))
                out.append("")
            if len(kind.registries) > 1 or (kind.registries and not registry):
                out.append(f"**{t['registry']}:** " + ", ".join(f"`{r}`" for r in kind.registries))
                out.append("")
            if kind.fields:
                out += [f"**{t['payload']}:** {kind.fields}", ""]
            out += [kind.description or f"*{t['none']}*", ""]
    return "\n".join(out).rstrip() + "\n"


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace the record-kinds marker of a Markdown page with the generated list."""
    if page.file.src_uri.endswith(".ipynb") or "record-kinds" not in markdown:
        return markdown
    lang = "zh" if page.file.src_uri.split("/", 1)[0] == "zh" else "en"

    def replace(match: re.Match[str]) -> str:
        try:
            return render(collect(match["package"]), lang)
        except Exception as exc:  # any failure must show, not pass silently
            log.warning("%s: cannot list the record kinds: %r", page.file.src_uri, exc)
            return f"`{match['package']}`: the record kinds could not be read: `{exc!r}`\n"

    return MARKER.sub(replace, markdown)
