"""MkDocs hook: render a JSON Schema that ships with the package as reference Markdown.

A page holds a marker line such as::

    <!-- json-schema steadyloop.replay/schemas/case.schema.json prefix=case -->

and the hook replaces it with a section per object the schema defines: the root (or,
for a schema that is a ``oneOf`` of records, one section per record, titled by the
value of its discriminator, such as ``append_event``), every inline object below a
property (``counts``, ``timings.runs[]``), and every ``$defs`` entry. Each section
lists every field with its type, whether it is required, its default and its
constraints, and says what it means: the field's ``description`` in the schema, or
else the line for that field in the ``Attributes:`` section of the object's
description (the docstring pydantic copied into the schema).

The schema file is read from the installed package, the same file the loader and
the report validator use, so the page cannot drift from the code. Headings get ASCII
ids (``case-op-append-event``, ``report-def-difference``) shared by every language;
the labels of the tables follow the page's language.

If the schema cannot be read, the hook logs a warning (which fails ``--strict``) and
leaves a visible note on the page.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from mkdocs.structure.pages import Page
from schema_notes import NOTES, SCHEMA_ZH, SECTIONS_ZH

log = logging.getLogger("mkdocs.hooks.json_schema")

MARKER = re.compile(
    r"^<!--\s*json-schema\s+(?P<package>[\w.]+)/(?P<path>[\w./-]+\.json)"
    r"(?:\s+prefix=(?P<prefix>[\w-]+))?(?:\s+level=(?P<level>[2-5]))?\s*-->\s*$",
    re.M,
)

LABELS = {
    "en": {
        "field": "field",
        "type": "type",
        "required": "required",
        "default": "default",
        "meaning": "meaning",
        "yes": "yes",
        "no": "no",
        "record": "Record",
        "object": "Object",
        "root": "The document",
        "one_of": "Each line is one of these records, chosen by `{}`:",
        "no_fields": "No fields.",
        "array_of": "array of",
        "object_of": "object of",
        "any": "any JSON value",
        "one_of_values": "one of",
        "constant": "always",
        "source": "Rendered from",
        "extra": "other keys allowed",
        "length": "length",
        "min_items": "at least {} item(s)",
        "unique": "items unique",
        "pattern": "pattern",
        "or": "or",
    },
    "zh": {
        "field": "字段",
        "type": "类型",
        "required": "必填",
        "default": "默认值",
        "meaning": "含义",
        "yes": "是",
        "no": "否",
        "record": "记录",
        "object": "对象",
        "root": "整个文档",
        "one_of": "每一行是下列记录之一，由 `{}` 字段区分：",
        "no_fields": "没有字段。",
        "array_of": "数组，元素为",
        "object_of": "对象，值为",
        "any": "任意 JSON 值",
        "one_of_values": "取值之一：",
        "constant": "固定为",
        "source": "生成自",
        "extra": "允许其他键",
        "length": "长度",
        "min_items": "至少 {} 项",
        "unique": "元素不重复",
        "pattern": "格式",
        "or": "或",
    },
}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def load_schema(package: str, path: str) -> dict[str, Any]:
    """Read a schema file that ships inside ``package``."""
    resource = importlib.resources.files(package).joinpath(path)
    data: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return data


def _attributes(description: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its prose and its ``Attributes:`` entries."""
    prose, _, rest = description.partition("\nAttributes:\n")
    entries: dict[str, str] = {}
    current: str | None = None
    for line in rest.splitlines():
        m = re.match(r"^ {4}(\w+): (.*)$", line)
        if m:
            current = m.group(1)
            entries[current] = m.group(2).strip()
        elif current and line.startswith("        "):
            entries[current] += " " + line.strip()
        elif line.strip():
            current = None
    return prose.strip(), entries


def _rst_to_md(text: str) -> str:
    """Docstring reST in Markdown: ``code`` roles and literals to backticks."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass
class _Section:
    key: str
    anchor: str
    title: str
    description: str
    node: dict[str, Any]
    kind: str  # "record", "object", "root"


@dataclass
class _Renderer:
    schema: dict[str, Any]
    prefix: str
    lang: str
    level: int = 3
    labels: dict[str, str] = field(default_factory=dict)
    def_anchors: dict[str, str] = field(default_factory=dict)
    record_defs: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.labels = LABELS.get(self.lang, LABELS["en"])
        records = self._records()
        for name, op in records:
            self.def_anchors[name] = f"{self.prefix}-op-{_slug(op)}"
            self.record_defs.add(name)
        for name in self.schema.get("$defs", {}):
            self.def_anchors.setdefault(name, f"{self.prefix}-def-{_slug(name)}")

    # -- the records of a oneOf schema ----------------------------------------------

    def _discriminator(self) -> str | None:
        disc = self.schema.get("discriminator")
        return disc.get("propertyName") if isinstance(disc, dict) else None

    def _records(self) -> list[tuple[str, str]]:
        """(def name, discriminator value) of each record of a top-level ``oneOf``."""
        prop = self._discriminator()
        out = []
        for option in self.schema.get("oneOf", []):
            ref = option.get("$ref", "")
            name = ref.rsplit("/", 1)[-1]
            node = self.schema.get("$defs", {}).get(name, {})
            const = node.get("properties", {}).get(prop or "", {}).get("const")
            if ref and const is not None:
                out.append((name, str(const)))
        return out

    # -- types ---------------------------------------------------------------------------

    def type_of(self, node: dict[str, Any]) -> str:
        """A short description of a schema node's type, with links to its sections."""
        lab = self.labels
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return f"[`{name}`](#{self.def_anchors[name]})"
        if "const" in node:
            return f"{lab['constant']} `{json.dumps(node['const'], ensure_ascii=False)}`"
        if "enum" in node:
            values = ", ".join(f"`{json.dumps(v, ensure_ascii=False)}`" for v in node["enum"])
            return f"{lab['one_of_values']} {values}"
        for key in ("anyOf", "oneOf"):
            if key in node:
                return f" {lab['or']} ".join(self.type_of(option) for option in node[key])
        kind = node.get("type")
        if isinstance(kind, list):
            return f" {lab['or']} ".join(f"`{k}`" for k in kind)
        if kind == "array":
            items = node.get("items")
            return f"{lab['array_of']} {self.type_of(items)}" if items else "`array`"
        if kind == "object":
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                return f"{lab['object_of']} {self.type_of(extra)}"
            return "`object`"
        if kind:
            return f"`{kind}`"
        return lab["any"]

    def constraints(self, node: dict[str, Any]) -> list[str]:
        """The constraints of a node (and of the non-null branch of an optional one)."""
        lab = self.labels
        found: list[str] = []
        branches = [node]
        for key in ("anyOf", "oneOf"):
            branches += [b for b in node.get(key, []) if isinstance(b, dict)]
        for b in branches:
            if "minLength" in b:
                found.append(f"{lab['length']} ≥ {b['minLength']}")
            if "maxLength" in b:
                found.append(f"{lab['length']} ≤ {b['maxLength']}")
            if "minimum" in b:
                found.append(f"≥ {b['minimum']}")
            if "exclusiveMinimum" in b:
                found.append(f"> {b['exclusiveMinimum']}")
            if "maximum" in b:
                found.append(f"≤ {b['maximum']}")
            if "exclusiveMaximum" in b:
                found.append(f"< {b['exclusiveMaximum']}")
            if "minItems" in b:
                found.append(lab["min_items"].format(b["minItems"]))
            if b.get("uniqueItems"):
                found.append(lab["unique"])
            if "pattern" in b:
                found.append(f"{lab['pattern']} `{b['pattern']}`")
        return list(dict.fromkeys(found))

    # -- sections ------------------------------------------------------------------------

    def sections(self) -> list[_Section]:
        """Every object to document, in reading order."""
        out: list[_Section] = []
        defs = self.schema.get("$defs", {})
        records = self._records()
        if records:
            for name, op in records:
                node = defs[name]
                out.append(
                    _Section(
                        op, self.def_anchors[name], op, node.get("description", ""), node, "record"
                    )
                )
        elif "properties" in self.schema:
            out.append(
                _Section(
                    "", f"{self.prefix}-root", self.schema.get("title", ""), "", self.schema, "root"
                )
            )
            out += self._inline(self.schema, "", f"{self.prefix}-root")
        for name, node in defs.items():
            if name in self.record_defs:
                continue
            out.append(
                _Section(
                    name, self.def_anchors[name], name, node.get("description", ""), node, "object"
                )
            )
            out += self._inline(node, name, self.def_anchors[name])
        return out

    def _inline(self, node: dict[str, Any], key: str, anchor: str) -> list[_Section]:
        """Sections for objects defined inline under a node's properties.

        ``key`` is the section key of ``node`` (``""`` for the document, a def's name);
        an inline object's key is its path below it: ``counts``, ``case.runs[]``.
        """
        out: list[_Section] = []
        for name, prop in node.get("properties", {}).items():
            target, suffix = prop, ""
            if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
                target, suffix = prop["items"], "[]"
            if target.get("type") == "object" and "properties" in target:
                sub_key = f"{key}.{name}{suffix}" if key else f"{name}{suffix}"
                sub_anchor = f"{anchor}-{_slug(name + suffix)}"
                out.append(_Section(sub_key, sub_anchor, sub_key, "", target, "object"))
                out += self._inline(target, sub_key, sub_anchor)
        return out

    def meaning(self, section: _Section, name: str, prop: dict[str, Any]) -> str:
        """What a field means, in the renderer's language (empty if nobody says)."""
        _prose, attributes = _attributes(section.description)
        key = f"{section.key}.{name}" if section.key else name
        notes = NOTES.get(self.lang, {})
        keys = (f"{self.prefix}/{key}", key, name)
        if self.lang == "zh":
            for source in (SCHEMA_ZH, notes):
                for k in keys:
                    if k in source:
                        return source[k]
        found = prop.get("description") or attributes.get(name, "")
        if found:
            return str(found)
        for source in (notes, NOTES["en"]):
            for k in keys:
                if k in source:
                    return source[k]
        return ""

    def render_section(self, section: _Section, inline_anchors: dict[str, str]) -> str:
        lab = self.labels
        level = "#" * self.level
        title = f"`{section.title}`" if section.title else lab["root"]
        if section.kind == "root":
            title = lab["root"]
        out = [f"{level} {title} {{#{section.anchor}}}", ""]
        prose, _ = _attributes(section.description)
        if self.lang == "zh" and f"{self.prefix}/{section.key}" in SECTIONS_ZH:
            prose = SECTIONS_ZH[f"{self.prefix}/{section.key}"]
        if prose:
            out += [_rst_to_md(prose), ""]
        elif section.kind == "root" and self.schema.get("description") and self.lang != "zh":
            out += [_rst_to_md(self.schema["description"]), ""]
        properties: dict[str, Any] = section.node.get("properties", {})
        required = set(section.node.get("required", []))
        if not properties:
            out += [lab["no_fields"], ""]
            return "\n".join(out)
        head = [lab["field"], lab["type"], lab["required"], lab["default"], lab["meaning"]]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, prop in properties.items():
            kind = self.type_of(prop)
            key = f"{section.anchor}/{name}"
            if key in inline_anchors:
                kind = f"[{kind}](#{inline_anchors[key]})"
            default = (
                f"`{json.dumps(prop['default'], ensure_ascii=False)}`" if "default" in prop else ""
            )
            meaning = self.meaning(section, name, prop)
            notes = self.constraints(prop)
            text = _rst_to_md(meaning)
            if notes:
                sep = "；" if self.lang == "zh" else "; "
                paren = ("（", "）") if self.lang == "zh" else (" (", ")")
                text = (text if text else "") + paren[0] + sep.join(notes) + paren[1]
                text = text.strip()
            row = [
                f"`{name}`",
                kind,
                lab["yes"] if name in required else lab["no"],
                default,
                text,
            ]
            out.append("| " + " | ".join(_cell(c) for c in row) + " |")
        if section.node.get("additionalProperties") is True:
            out += ["", f"*{lab['extra']}*"]
        out.append("")
        return "\n".join(out)

    def render(self, source: str) -> str:
        lab = self.labels
        out: list[str] = []
        title = self.schema.get("title", "")
        out += [f"*{lab['source']} `{source}`* (`{self.schema.get('$id', '')}`): {title}.", ""]
        prop = self._discriminator()
        if self._records() and prop:
            if self.lang != "zh":
                out += [_rst_to_md(self.schema.get("description", "")), ""]
            names = ", ".join(
                f"[`{op}`](#{self.def_anchors[name]})" for name, op in self._records()
            )
            out += [f"{lab['one_of'].format(prop)} {names}.", ""]
        sections = self.sections()
        # Link a property to the section of the inline object below it.
        inline_anchors: dict[str, str] = {}
        for section in sections:
            for name, node in section.node.get("properties", {}).items():
                target = node.get("items", node) if node.get("type") == "array" else node
                if isinstance(target, dict) and "properties" in target:
                    for other in sections:
                        if other.node is target:
                            inline_anchors[f"{section.anchor}/{name}"] = other.anchor
        for section in sections:
            out.append(self.render_section(section, inline_anchors))
        return "\n".join(out).rstrip() + "\n"


def generate(
    package: str, path: str, prefix: str | None = None, lang: str = "en", level: int = 3
) -> str:
    """Return the Markdown reference for the schema ``path`` inside ``package``."""
    schema = load_schema(package, path)
    name = prefix or _slug(path.rsplit("/", 1)[-1].split(".", 1)[0])
    renderer = _Renderer(schema, name, lang, level)
    return renderer.render(f"{package}/{path}")


def schema_anchors(package: str, path: str, prefix: str) -> dict[str, list[str]]:
    """Each section id the page gets, with the field names its table lists."""
    renderer = _Renderer(load_schema(package, path), prefix, "en")
    return {s.anchor: list(s.node.get("properties", {})) for s in renderer.sections()}


def field_meanings(package: str, path: str, prefix: str, lang: str) -> dict[str, str]:
    """``section key.field`` → the meaning the page shows, for every field of a schema."""
    renderer = _Renderer(load_schema(package, path), prefix, lang)
    return {
        (f"{s.key}.{name}" if s.key else name): renderer.meaning(s, name, prop)
        for s in renderer.sections()
        for name, prop in s.node.get("properties", {}).items()
    }


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace each schema marker of a Markdown page with the rendered schema."""
    if page.file.src_uri.endswith(".ipynb") or "json-schema" not in markdown:
        return markdown
    lang = "zh" if page.file.src_uri.split("/", 1)[0] == "zh" else "en"

    def replace(match: re.Match[str]) -> str:
        package, path = match.group("package"), match.group("path")
        level = int(match.group("level") or 3)
        try:
            return generate(package, path, match.group("prefix"), lang, level)
        except Exception as exc:  # any failure must show, not pass silently
            log.warning(
                "%s: cannot render the schema %s/%s: %r", page.file.src_uri, package, path, exc
            )
            return (
                '!!! failure "Schema unavailable"\n\n'
                f"    `{package}/{path}` could not be read: `{exc!r}`\n"
            )

    return MARKER.sub(replace, markdown)
