"""Journal backends: how Steadyloop's own store under test reaches its journal.

A [`Backend`][steadyloop.replay.Backend] is not a store under test: it opens the journal
a [`JournalStore`][steadyloop.replay.JournalStore] runs Steadyloop's session service on
(the one store type is [`SessionStore`][steadyloop.replay.SessionStore]). The load stage
turns a backend name or journal URL into one here, through the one URL parser
(`steadyloop._urls`), and wraps it in a `JournalStore`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from steadyloop._errors import EncodingError, UnknownBackend
from steadyloop._urls import ALIASES, URL, as_url
from steadyloop.journal import (
    AppendResult,
    Files,
    ForwardingJournal,
    Journal,
    JSONLJournal,
    MemoryJournal,
    PreparedBatch,
    open_journal,
)
from steadyloop.records import check_canonical, decode

__all__ = [
    "EMBEDDED_BACKENDS",
    "SERVER_BACKENDS",
    "Backend",
    "default_backends",
    "make_workdir",
    "resolve_backends",
    "temporary_backend",
    "tightest_backend",
]

EMBEDDED_BACKENDS: tuple[str, ...] = ("memory", "sqlite", "jsonl")
"""Backends that need no server; the default selection."""

SERVER_BACKENDS: dict[str, str] = {
    "postgres": "STEADYLOOP_POSTGRES_URL",
    "redis": "STEADYLOOP_REDIS_URL",
    "mysql": "STEADYLOOP_MYSQL_URL",
}
"""Server backends, each with the environment variable that names its server."""

_FAMILY_NAMES = {"postgresql": "postgres"}
"""A backend's default name where it is not its URL family's (`postgres`, as its variable)."""


@dataclass(frozen=True)
class Backend:
    """A backend the harness can run cases on.

    Attributes:
        name: Its name in reports and in allowed differences (``"sqlite"``, …).
        open: Opens the store; called again after a simulated crash, so it must reach
            the same store every time.
        open_files: For file backends: opens the store on a given file layer, which
            lets the harness tear a write in the middle. ``None`` elsewhere.
        dispose: Removes the store itself, if the harness created it.
    """

    name: str
    open: Callable[[], Awaitable[Journal]]
    open_files: Callable[[Files], Awaitable[Journal]] | None = None
    dispose: Callable[[], Awaitable[None]] | None = None

    @classmethod
    def from_url(cls, url: str | URL, name: str | None = None) -> Backend:
        """A backend on an existing store named by a journal URL.

        A nameless ``memory://`` opens a new private store each time, which a case
        that crashes and reopens could never reach again: it stands for a fresh named
        in-memory store instead, the same one for every case run with this backend,
        removed with [`dispose`][steadyloop.replay.Backend].
        """
        parsed = as_url(url)
        known = parsed.family in ALIASES.values()
        label = name or _FAMILY_NAMES.get(parsed.family, parsed.family if known else parsed.scheme)
        if parsed.family == "memory" and not parsed.bare:
            # The same test open_journal makes for "no name given".
            return _memory_store(label)

        async def opener() -> Journal:
            return await open_journal(parsed)

        files_opener = None
        if parsed.family == "jsonl":

            async def files_opener(files: Files) -> Journal:
                return await open_journal(parsed, files=files)

        return cls(label, opener, files_opener)


def _memory_store(label: str) -> Backend:
    """A backend on a new named in-memory store, forgotten on dispose."""
    store = f"replay-{uuid.uuid4().hex}"

    async def open_memory() -> Journal:
        return await open_journal(f"memory://{store}")

    async def forget() -> None:
        MemoryJournal.forget(store)

    return Backend(label, open_memory, None, forget)


def temporary_backend(name: str, workdir: Path) -> Backend:
    """A backend on a fresh embedded store (`memory`, `sqlite`, `jsonl`) under `workdir`."""
    if name == "memory":
        return _memory_store("memory")
    if name == "sqlite":
        path = workdir / f"sqlite-{uuid.uuid4().hex[:8]}.db"

        async def open_sqlite() -> Journal:
            return await open_journal(f"sqlite://{path}")

        async def remove_sqlite() -> None:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f"{path}{suffix}")

        return Backend("sqlite", open_sqlite, None, remove_sqlite)
    directory = workdir / f"jsonl-{uuid.uuid4().hex[:8]}"

    async def open_jsonl() -> Journal:
        directory.mkdir(exist_ok=True)
        return await JSONLJournal.open(directory)

    async def open_jsonl_files(files: Files) -> Journal:
        directory.mkdir(exist_ok=True)
        return await JSONLJournal.open(directory, files=files)

    async def remove_jsonl() -> None:
        shutil.rmtree(directory, ignore_errors=True)

    return Backend("jsonl", open_jsonl, open_jsonl_files, remove_jsonl)


def default_backends(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the default selection of backends.

    That is ``memory``, ``sqlite`` and ``jsonl``, then each server backend whose
    environment variable (``STEADYLOOP_POSTGRES_URL``, …) is set.
    """
    env = os.environ if environ is None else environ
    return [*EMBEDDED_BACKENDS, *(n for n, var in SERVER_BACKENDS.items() if env.get(var))]


def resolve_backends(
    specs: Sequence[str | Backend],
    workdir: str | Path,
    environ: Mapping[str, str] | None = None,
) -> list[Backend]:
    """Turn backend names and URLs into [`Backend`][steadyloop.replay.Backend] objects.

    Args:
        specs: Names (``memory``, ``sqlite``, ``jsonl`` — fresh stores under
            ``workdir``; ``postgres``, ``redis``, ``mysql`` — the server their
            environment variable names), journal URLs, or ready
            [`Backend`][steadyloop.replay.Backend] objects.
        workdir: Where temporary stores go.
        environ: The environment to read server URLs from (``os.environ`` by default).

    Raises:
        UnknownBackend: A name is unknown, a server's variable is not set, or two
            backends would have the same name.
    """
    env = os.environ if environ is None else environ
    out: list[Backend] = []
    for spec in specs:
        if isinstance(spec, Backend):
            out.append(spec)
        elif spec in EMBEDDED_BACKENDS:
            out.append(temporary_backend(spec, Path(workdir)))
        elif spec in SERVER_BACKENDS:
            variable = SERVER_BACKENDS[spec]
            url = env.get(variable)
            if not url:
                raise UnknownBackend(f"backend {spec!r}: set {variable} to its server's URL")
            out.append(Backend.from_url(url, spec))
        elif ":" in spec:
            out.append(Backend.from_url(spec))
        else:
            known = ", ".join([*EMBEDDED_BACKENDS, *SERVER_BACKENDS])
            raise UnknownBackend(f"unknown backend {spec!r}; use one of {known}, or a URL")
    names = [b.name for b in out]
    for name in names:
        if names.count(name) > 1:
            raise UnknownBackend(
                f"two backends are named {name!r}; give URLs distinct names with Backend.from_url"
            )
    return out


class _Tightest(ForwardingJournal):
    """A journal that refuses what the strictest of Steadyloop's journals refuses.

    The JSONL journal keeps each record inside a line object, one level deeper than
    the others keep it: a value that fits everywhere else is refused there. This
    journal checks every record at that depth, so a dry run on it finds every value
    some Steadyloop journal would refuse.
    """

    async def _append(self, batch: PreparedBatch) -> AppendResult:
        for write, texts in zip(batch.writes, batch.encoded, strict=True):
            for text in texts:
                try:
                    check_canonical({"record": decode(text)})
                except EncodingError as exc:
                    raise EncodingError(
                        f"a record of stream {write.stream!r} nests too deep for the JSONL "
                        f"journal: {str(exc).rsplit(' (at ', 1)[0]}",
                        path=exc.path.removeprefix("/record"),
                    ) from None
        return await super()._append(batch)


def tightest_backend(label: str) -> Backend:
    """A backend on a new named in-memory store that refuses what the strictest journal refuses.

    A run on it finds every value some Steadyloop journal would refuse (see
    [`steadyloop_limits`][steadyloop.replay.steadyloop_limits]); `dispose` forgets the store.
    """
    store = f"replay-limits-{uuid.uuid4().hex}"

    async def tight() -> Journal:
        return _Tightest(await open_journal(f"memory://{store}"))

    async def forget() -> None:
        MemoryJournal.forget(store)

    return Backend(label, tight, None, forget)


def make_workdir() -> Path:
    """Create a private temporary directory for embedded stores."""
    return Path(tempfile.mkdtemp(prefix="steadyloop-replay-"))
