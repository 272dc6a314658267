"""Load: turn a selection (names, journal URLs, store URLs, stores) into stores under test.

The first stage of a replay. Each selected string is parsed once, by the one URL
module (`steadyloop._urls`, through
[`parse_store_url`][steadyloop.replay.parse_store_url] and
[`Backend.from_url`][steadyloop.replay.Backend]), and becomes a
[`SessionStore`][steadyloop.replay.SessionStore]: a framework's store from its opener, or
Steadyloop's own, a [`JournalStore`][steadyloop.replay.JournalStore] on a
[`Backend`][steadyloop.replay.Backend]. Nothing here runs a case; the stores go on to the
harness (the drive stage) and nothing comes back here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path

from steadyloop._errors import BackendUnavailable, SteadyloopError, UnknownBackend
from steadyloop._urls import split_label
from steadyloop.replay._backends import (
    EMBEDDED_BACKENDS,
    SERVER_BACKENDS,
    Backend,
    resolve_backends,
)
from steadyloop.replay._journal_store import JournalStore
from steadyloop.replay._store import (
    STORE_ENTRY_POINT_GROUP,
    SessionStore,
    StoreSpec,
    parse_store_url,
    store_opener,
    without_passwords,
)

__all__ = ["add_references", "known_store_names", "probe", "resolve_stores"]

_log = logging.getLogger(__name__)


def _open_framework_store(spec: StoreSpec) -> SessionStore:
    """Call the framework's opener; an opener that fails is a store that cannot be opened."""
    opener = store_opener(spec.framework)
    try:
        return opener(spec)
    except SteadyloopError:
        raise
    except Exception as exc:
        detail = without_passwords(f"{type(exc).__name__}: {exc}".strip().splitlines()[0])
        raise BackendUnavailable(f"store {spec.redacted!r} cannot be opened: {detail}") from None


def resolve_stores(
    specs: Sequence[str | SessionStore],
    workdir: str | Path,
    environ: Mapping[str, str] | None = None,
) -> list[SessionStore]:
    """Turn backend names, journal URLs and store URLs into stores under test.

    Args:
        specs: The names and journal URLs
            [`resolve_backends`][steadyloop.replay.resolve_backends] takes, plus
            `FRAMEWORK+BACKEND[://…]` store URLs (resolved through the
            `steadyloop.replay_stores` entry points) and ready
            [`SessionStore`][steadyloop.replay.SessionStore] objects (Steadyloop's own on a
            [`Backend`][steadyloop.replay.Backend] of your own is
            `JournalStore(backend)`). A string may carry
            a label, `LABEL=URL` (the text before the first `=`, when it holds no `:`):
            the store's name in the report, so two stores of one backend can be
            selected together.
        workdir: Where temporary stores go.
        environ: The environment to read server URLs from (``os.environ`` by default).

    Raises:
        UnknownBackend: A name or framework is unknown, a bare
            [`Backend`][steadyloop.replay.Backend] is selected, a server's variable is not set,
            two stores would have the same name, a label is malformed, or a framework's
            extra is missing ([`MissingExtra`][steadyloop.replay.MissingExtra]).
        BackendUnavailable: A framework's opener failed (the message names the store).
    """
    out: list[SessionStore] = []
    directory = Path(workdir)
    for spec in specs:
        if isinstance(spec, Backend):
            raise UnknownBackend(
                f"backend {spec.name!r} is a journal, not a store under test: "
                "select JournalStore(backend)"
            )
        if not isinstance(spec, str):
            out.append(spec)
        else:
            label, url = split_label(spec)
            parsed = parse_store_url(url, directory)
            if parsed is None:
                for backend in resolve_backends([url], directory, environ):
                    named = backend if label is None else dataclasses.replace(backend, name=label)
                    out.append(JournalStore(named))
            else:
                if label is not None:
                    parsed = dataclasses.replace(parsed, name=label)
                out.append(_open_framework_store(parsed))
    names = [s.name for s in out]
    for name in names:
        if names.count(name) > 1:
            raise UnknownBackend(
                f"two stores are named {name!r}; give each a label of its own: "
                f"LABEL=URL (for example a={name} b={name})"
            )
    return out


def add_references(
    stores: Sequence[SessionStore], workdir: str | Path, reference: str | None = None
) -> list[SessionStore]:
    """Add each framework's in-memory store where the selection names none.

    A framework's stores are compared with its in-memory store (backend `memory`): a
    selection that names only a production store (`adk+sqlite`) would otherwise compare
    nothing. Steadyloop's own stores are compared with each case's expectation, and a
    framework whose store `reference` names keeps that reference; neither gets one.
    A framework whose opener has no `memory` backend gets none either.

    Returns:
        The stores, each added one just before the first store of its framework.
    """
    chosen = next((s.framework for s in stores if s.name == reference), None)
    out: list[SessionStore] = []
    seen: set[str] = set()
    for store in stores:
        framework = store.framework
        if framework not in seen:
            seen.add(framework)
            needs = framework not in ("steadyloop", chosen) and not any(
                s.framework == framework and s.backend == "memory" for s in stores
            )
            if needs:
                spec = parse_store_url(f"{framework}+memory", Path(workdir))
                assert spec is not None
                try:
                    out.append(_open_framework_store(spec))
                except (UnknownBackend, BackendUnavailable) as exc:
                    _log.info("no in-memory reference for %s: %s", framework, exc)
        out.append(store)
    return out


def known_store_names() -> frozenset[str]:
    """Store names that may be named in `allowed_diffs` without being selected.

    Steadyloop's backend names, and `FRAMEWORK+BACKEND` for each framework an installed
    package registers, are recognised; an unselected name outside these is reported.
    """
    names = {*EMBEDDED_BACKENDS, *SERVER_BACKENDS}
    frameworks = {ep.name for ep in entry_points(group=STORE_ENTRY_POINT_GROUP)}
    return frozenset(names | {f"{f}+*" for f in frameworks})


async def probe(store: SessionStore) -> None:
    """Open and close a store once, before anything runs, so an unreachable one stops the replay.

    Raises:
        BackendUnavailable: The store cannot be opened (the message holds no password).
    """
    try:
        await store.open()
    except SteadyloopError:
        raise
    except Exception as exc:
        # A driver's message may quote the URL it was given: never with its password.
        detail = without_passwords(str(exc))
        raise BackendUnavailable(
            f"backend {store.name!r} cannot be opened: {type(exc).__name__}: {detail}"
        ) from None
    await store.close()
