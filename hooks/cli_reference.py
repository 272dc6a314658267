"""MkDocs hook: generate the CLI reference from the typer app, at build time.

A page holds a marker line such as::

    <!-- cli-reference steadyloop.cli:app prog=steadyloop -->

and the hook replaces it with Markdown for the app and every sub-command: usage,
help text, arguments and options, read from the app itself, so the reference is never
retyped and never stale. Headings get ASCII ids (``cli-steadyloop-journal-check``) that
are the same in every language.

If the app cannot be imported the hook logs a warning (which fails ``--strict``) and
leaves a visible note on the page instead.
"""

from __future__ import annotations

import importlib
import logging
import re
from typing import Any

from mkdocs.structure.pages import Page

log = logging.getLogger("mkdocs.hooks.cli_reference")

MARKER = re.compile(
    r"^<!--\s*cli-reference\s+(?P<target>[\w.]+:\w+)(?:\s+prog=(?P<prog>[\w.-]+))?\s*-->\s*$",
    re.M,
)
# Only rich's style tags: "[required]" or "[default: 3]" in help text are content.
_RICH_STYLES = (
    "bold|b|italic|i|underline|u|strike|s|dim|reverse|blink|code|link|"
    "red|green|yellow|blue|magenta|cyan|white|black"
)
_RICH_TAG = re.compile(rf"\[/?(?:(?:not )?(?:{_RICH_STYLES})(?: [a-z_]+)*)?\]")


def load_command(target: str) -> Any:
    """Import ``module:attribute`` and return it as a click command.

    A typer app is converted with ``typer.main.get_command``; a click command is
    returned as is.
    """
    module_name, _, attr = target.partition(":")
    obj = getattr(importlib.import_module(module_name), attr)
    if hasattr(obj, "registered_commands"):  # a typer.Typer
        import typer.main

        return typer.main.get_command(obj)
    return obj


def _clean(text: str | None) -> str:
    r"""Help text as Markdown: rich markup removed, typer's \b markers dropped."""
    if not text:
        return ""
    text = _RICH_TAG.sub("", text)
    lines = [line for line in text.splitlines() if line.strip() != "\b"]
    return "\n".join(lines).strip()


def _slug(path: list[str]) -> str:
    return "cli-" + "-".join(re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in path)


def _escape_inline(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


# The section labels in each page language; the help text itself stays the program's own.
LABELS = {
    "en": {
        "usage": "**Usage:**",
        "arguments": "**Arguments:**",
        "options": "**Options:**",
        "commands": "**Commands:**",
    },
    "zh": {
        "usage": "**用法：**",
        "arguments": "**参数：**",
        "options": "**选项：**",
        "commands": "**子命令：**",
    },
}


def render_command(
    command: Any, path: list[str], level: int = 2, parent: Any = None, lang: str = "en"
) -> str:
    """Render one command and, recursively, its sub-commands as Markdown.

    Args:
        command: The click command.
        path: The words that invoke it (``["steadyloop", "journal", "check"]``).
        level: The heading level of its section.
        parent: The click context of the command above it.
        lang: The page's language, for the section labels (``en`` or ``zh``).
    """
    labels = LABELS[lang]
    ctx = command.context_class(command, info_name=path[-1], parent=parent)
    title = " ".join(path)
    out = [f"{'#' * level} `{title}` {{#{_slug(path)}}}", ""]
    help_text = _clean(command.help)
    if help_text:
        out += [help_text, ""]
    usage = command.get_usage(ctx).strip().removeprefix("Usage:").strip()
    out += [labels["usage"], "", "```text", f"$ {usage}", "```", ""]

    arguments: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            record = (param.human_readable_name, "")
        if record[0] == "--help":
            continue
        target = options if param.param_type_name == "option" else arguments
        target.append((record[0], _clean(record[1])))
    for heading, rows in (("arguments", arguments), ("options", options)):
        if rows:
            out += [labels[heading], ""]
            out += [f"* `{name}`: {_escape_inline(text)}".rstrip(": ") for name, text in rows]
            out.append("")

    if hasattr(command, "list_commands"):
        subs = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            subs.append((name, sub))
        if subs:
            out += [labels["commands"], ""]
            for name, sub in subs:
                short = _clean(sub.get_short_help_str(limit=200))
                link = f"[`{name}`](#{_slug([*path, name])})"
                out.append(f"* {link}: {_escape_inline(short)}".rstrip(": "))
            out.append("")
            for name, sub in subs:
                out.append(render_command(sub, [*path, name], min(level + 1, 6), ctx, lang))
    return "\n".join(out).rstrip() + "\n"


def generate(target: str, prog: str | None = None, lang: str = "en") -> str:
    """Return the Markdown reference for the command ``target`` (``module:attr``)."""
    command = load_command(target)
    name = prog or getattr(command, "name", None) or target.partition(":")[0]
    return render_command(command, [name], lang=lang)


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace each CLI marker of a Markdown page with the generated reference."""
    if page.file.src_uri.endswith(".ipynb") or "cli-reference" not in markdown:
        return markdown
    lang = "zh" if page.file.src_uri.startswith("zh/") else "en"

    def replace(match: re.Match[str]) -> str:
        target = match.group("target")
        try:
            return generate(target, match.group("prog"), lang)
        except Exception as exc:  # any failure must show, not pass silently
            log.warning(
                "%s: cannot generate the CLI reference from %s: %r", page.file.src_uri, target, exc
            )
            return (
                '!!! failure "CLI reference unavailable"\n\n'
                f"    `{target}` could not be loaded: `{exc!r}`\n"
            )

    return MARKER.sub(replace, markdown)
