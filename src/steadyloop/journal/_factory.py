"""Open a journal from a URL, importing a backend's driver only when its URL is used."""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from importlib.metadata import entry_points
from typing import Any

from steadyloop._errors import UnknownBackend
from steadyloop._urls import ALIASES, URL, parse_url, redact_url
from steadyloop.journal._protocol import Journal

__all__ = [
    "DEFAULT_URL",
    "ENTRY_POINT_GROUP",
    "SCHEMES",
    "URL",
    "open_journal",
    "parse_url",
    "redact_url",
]

ENTRY_POINT_GROUP = "steadyloop.journals"
"""Entry-point group through which a package adds a journal scheme.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."steadyloop.journals"]
    myscheme = "mypackage.journal:MyJournal"

and ``open_journal("myscheme://…")`` then calls ``await MyJournal.open(url, **options)``,
in any process, so the conformance suite's multi-process test works on it too."""

DEFAULT_URL = "sqlite:steadyloop.db"
"""The journal used when none is named: a SQLite file in the working directory."""

# family -> (module, opener attribute). Server modules import their drivers lazily.
# Aliases (postgres, mariadb, rediss) reach their family through steadyloop._urls.ALIASES.
SCHEMES: dict[str, tuple[str, str]] = {
    "memory": ("steadyloop.journal._memory", "MemoryJournal"),
    "jsonl": ("steadyloop.journal._jsonl", "JSONLJournal"),
    "sqlite": ("steadyloop.journal._sqlite", "SQLiteJournal"),
    "postgresql": ("steadyloop.journal._postgres", "PostgresJournal"),
    "redis": ("steadyloop.journal._redis", "RedisJournal"),
    "mysql": ("steadyloop.journal._mysql", "MySQLJournal"),
}


def _entry_point(scheme: str) -> Any:
    """The backend class a installed package registers for ``scheme``, if any."""
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
        try:
            return ep.load()
        except Exception as exc:
            raise UnknownBackend(
                f"journal scheme {scheme!r} is registered by entry point {ep.value!r}, "
                f"which does not load: {type(exc).__name__}: {exc}"
            ) from exc
    return None


async def open_journal(
    url: str | URL | None = None, *, create: bool = True, **options: Any
) -> Journal:
    """Open the journal a URL names.

    Supported URLs: ``memory://`` (or ``memory://NAME``), ``jsonl:///DIR``,
    ``sqlite:///FILE`` or ``sqlite:RELATIVE_FILE`` (the default), ``postgresql://…``,
    ``redis://…`` and ``mysql://…``. A server backend's driver is imported only when its
    URL is opened. Other packages add schemes through the
    [`ENTRY_POINT_GROUP`][steadyloop.journal.ENTRY_POINT_GROUP] entry points.

    Args:
        url: The journal URL; [`DEFAULT_URL`][steadyloop.journal.DEFAULT_URL] when ``None``.
        create: Whether a journal that does not exist is created (a SQLite file, a
            server's tables or keys under the URL's prefix). Tools that only inspect a
            journal pass ``False``, so that a mistyped path or prefix is an error ("no
            journal here") rather than a new, empty journal.
        **options: Passed to the backend (for example ``files=`` for JSONL).

    Raises:
        UnknownBackend: The scheme is unknown or the URL is malformed.
        BackendUnavailable: The backend cannot be reached or its driver is missing, or
            (with ``create=False``) no journal exists at the URL.
    """
    text = url or os.environ.get("STEADYLOOP_JOURNAL") or DEFAULT_URL
    if not isinstance(text, URL) and (not isinstance(text, str) or ":" not in text):
        raise UnknownBackend(
            f"{text!r} is not a journal URL; expected one of "
            + ", ".join(f"{s}://…" for s in sorted(SCHEMES))
        )
    parsed = text if isinstance(text, URL) else parse_url(text)
    entry = SCHEMES.get(parsed.scheme) or SCHEMES.get(parsed.family)
    opener: Callable[..., Awaitable[Journal]]
    if entry is None:
        plugin = _entry_point(parsed.scheme)
        if plugin is None:
            known = sorted(
                {*SCHEMES, *ALIASES, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))}
            )
            raise UnknownBackend(
                f"unknown journal scheme {parsed.scheme!r} in {parsed.redacted!r}; "
                "known schemes: " + ", ".join(known)
            )
        opener = plugin.open
        return await opener(parsed.text, **options)
    module_name, attr = entry
    cls = getattr(importlib.import_module(module_name), attr)
    if parsed.family == "memory":
        return cls(parsed.bare or None, create=create)  # type: ignore[no-any-return]
    if parsed.is_file:
        path = parsed.local_path()
        query = parsed.query
        if parsed.family == "sqlite":
            for key in ("synchronous", "prefix"):
                if key in query:
                    options.setdefault(key, query[key])
        if not create:
            options["create"] = False
        opener = cls.open
        return await opener(path, **options)
    if not create:
        options["create"] = False
    opener = cls.open
    # Our server backends take the parsed URL; a class another package put in SCHEMES
    # gets the text, as the documented ``open(url, **options)`` promises.
    ours = module_name.startswith("steadyloop.")
    return await opener(parsed if ours else parsed.text, **options)
