"""Open a journal from a URL, importing a backend's driver only when its URL is used."""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable, Callable
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from steadyloop._errors import UnknownBackend
from steadyloop.journal._protocol import Journal

__all__ = ["DEFAULT_URL", "ENTRY_POINT_GROUP", "SCHEMES", "open_journal", "redact_url"]

ENTRY_POINT_GROUP = "steadyloop.journals"
"""Entry-point group through which a package adds a journal scheme.

A package declares, in its ``pyproject.toml``::

    [project.entry-points."steadyloop.journals"]
    myscheme = "mypackage.journal:MyJournal"

and ``open_journal("myscheme://…")`` then calls ``await MyJournal.open(url, **options)``,
in any process, so the conformance suite's multi-process test works on it too."""

DEFAULT_URL = "sqlite:steadyloop.db"
"""The journal used when none is named: a SQLite file in the working directory."""

# scheme -> (module, opener attribute). Server modules import their drivers lazily.
SCHEMES: dict[str, tuple[str, str]] = {
    "memory": ("steadyloop.journal._memory", "MemoryJournal"),
    "jsonl": ("steadyloop.journal._jsonl", "JSONLJournal"),
    "sqlite": ("steadyloop.journal._sqlite", "SQLiteJournal"),
    "postgresql": ("steadyloop.journal._postgres", "PostgresJournal"),
    "postgres": ("steadyloop.journal._postgres", "PostgresJournal"),
    "redis": ("steadyloop.journal._redis", "RedisJournal"),
    "mysql": ("steadyloop.journal._mysql", "MySQLJournal"),
    "mariadb": ("steadyloop.journal._mysql", "MySQLJournal"),
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


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _local_path(url: str, scheme: str) -> str:
    """The path of a file URL: ``scheme:///abs/path`` or ``scheme:relative/path``."""
    rest = url[len(scheme) + 1 :]
    rest = rest.split("?", 1)[0]
    if rest.startswith("//"):
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise UnknownBackend(
                f"{url!r}: a {scheme} URL takes a path, not a host {parts.netloc!r}; "
                f"write {scheme}:///absolute/path or {scheme}:relative/path"
            )
        path = unquote(parts.path)
    else:
        path = unquote(rest)
    if not path:
        raise UnknownBackend(f"{url!r}: the {scheme} URL names no path")
    return os.path.expanduser(path)


async def open_journal(url: str | None = None, *, create: bool = True, **options: Any) -> Journal:
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
    url = url or os.environ.get("STEADYLOOP_JOURNAL") or DEFAULT_URL
    if not isinstance(url, str) or ":" not in url:
        raise UnknownBackend(
            f"{url!r} is not a journal URL; expected one of "
            + ", ".join(f"{s}://…" for s in sorted(SCHEMES))
        )
    scheme = url.split(":", 1)[0].lower()
    opener: Callable[..., Awaitable[Journal]]
    if scheme not in SCHEMES:
        plugin = _entry_point(scheme)
        if plugin is None:
            known = sorted({*SCHEMES, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
            raise UnknownBackend(
                f"unknown journal scheme {scheme!r} in {redact_url(url)!r}; known schemes: "
                + ", ".join(known)
            )
        opener = plugin.open
        return await opener(url, **options)
    module_name, attr = SCHEMES[scheme]
    cls = getattr(importlib.import_module(module_name), attr)
    query = dict(parse_qsl(urlsplit(url).query))
    if scheme == "memory":
        name = url[len("memory:") :].lstrip("/").split("?", 1)[0]
        return cls(name or None, create=create)  # type: ignore[no-any-return]
    if scheme in ("jsonl", "sqlite"):
        path = _local_path(url, scheme)
        if scheme == "sqlite" and "synchronous" in query:
            options.setdefault("synchronous", query["synchronous"])
        if scheme == "sqlite" and "prefix" in query:
            options.setdefault("prefix", query["prefix"])
        if not create:
            options["create"] = False
        opener = cls.open
        return await opener(path, **options)
    if not create:
        options["create"] = False
    opener = cls.open
    return await opener(url, **options)
