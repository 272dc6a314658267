"""The replay: load → drive → snapshot → diff → report, each stage calling only the next.

[`replay`][steadyloop.replay.replay] is the one function that runs the stages in order,
and the only module that knows them all:

1. load (`_load`): the selection becomes stores under test, each URL parsed once;
2. drive (`_harness`): each case runs on each store, which hands back a
   [`CaseRun`][steadyloop.replay.CaseRun];
3. snapshot (`_snapshot`): inside the run, what the store holds is read back into a
   [`Snapshot`][steadyloop.replay.Snapshot];
4. diff (`_compare`): each snapshot against the expectation and the reference;
5. report (`_report`): the comparisons, counted, as deterministic JSON.

Each stage imports only the stages and layers below it (``tests/replay/test_layers.py``
holds that), so a URL given to `--backends` goes down the layers and never comes back.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from steadyloop._errors import UnknownBackend
from steadyloop.replay._backends import default_backends, make_workdir
from steadyloop.replay._cases import Case
from steadyloop.replay._compare import choose_references
from steadyloop.replay._harness import CaseRun, check_steadyloop_limits, run_case
from steadyloop.replay._journal_store import JournalStore
from steadyloop.replay._load import add_references, known_store_names, probe, resolve_stores
from steadyloop.replay._report import Report, build_report
from steadyloop.replay._store import SessionStore
from steadyloop.replay._warnings import framework_warnings

__all__ = ["replay"]


async def replay(
    cases: Sequence[Case],
    backends: Sequence[str | SessionStore] | None = None,
    *,
    reference: str | None = None,
    keep: bool = False,
    ids: Literal["sequential", "random"] = "sequential",
    workdir: str | Path | None = None,
    progress: Callable[[str, str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Report:
    """Run every case on every store, compare, and report.

    Args:
        cases: Loaded cases (see [`load_cases`][steadyloop.replay.load_cases]).
        backends: Steadyloop backend names and journal URLs, store URLs
            (`FRAMEWORK+BACKEND[://…]`) and
            [`SessionStore`][steadyloop.replay.SessionStore] objects (a
            [`Backend`][steadyloop.replay.Backend] of your own goes in as
            `JournalStore(backend)`); by default
            ``memory``, ``sqlite``, ``jsonl`` and each server whose variable is set.
        reference: Overrides the reference of its framework (see
            [`choose_references`][steadyloop.replay.choose_references]).
        keep: Keep each case's data (and temporary stores) instead of deleting.
        ids: ``"sequential"`` ids and a step clock, or ``"random"`` ids and the wall
            clock.
        workdir: Where temporary stores go; a fresh temporary directory by default.
        progress: Called with ``(case_id, store)`` after each run.
        environ: Where server URLs are read from (``os.environ`` by default).

    Raises:
        UnknownBackend: A store is unknown, its extra is missing
            ([`MissingExtra`][steadyloop.replay.MissingExtra]), or the reference is not
            selected.
        CaseError: A case holds what Steadyloop's own stores refuse, and one of them
            is selected; nothing ran.
        BackendUnavailable: A store cannot be reached; nothing ran.
    """
    own = workdir is None
    directory = make_workdir() if workdir is None else Path(workdir)
    resolved: list[SessionStore] = []
    started = time.perf_counter()
    warned: list[dict[str, Any]] = []
    with framework_warnings(warned):
        try:
            resolved = resolve_stores(
                list(backends) if backends is not None else default_backends(environ),
                directory,
                environ,
            )
            resolved = add_references(resolved, directory, reference)
            names = [b.name for b in resolved]
            if not names:
                raise UnknownBackend("no backend selected")
            references = choose_references(
                [(s.name, s.framework, s.backend) for s in resolved], reference
            )
            if any(isinstance(store, JournalStore) for store in resolved):
                await check_steadyloop_limits(cases)
            for store in resolved:
                await probe(store)
            runs: dict[tuple[str, str], CaseRun] = {}
            for case in cases:
                for store in resolved:
                    run = await run_case(case, store, keep=keep, ids=ids)
                    runs[(case.case_id, store.name)] = run
                    if progress is not None:
                        progress(case.case_id, store.name)
                    await asyncio.sleep(0)
            known = known_store_names()
            report = build_report(cases, runs, names, references, known_backends=known)
            report.frameworks = {s.name: s.framework for s in resolved}
            report.timings["total_seconds"] = round(time.perf_counter() - started, 6)
            report.workdir = directory if keep and own else None
            report.warnings = warned
            return report
        finally:
            if not keep:
                for store in resolved:
                    await store.dispose()
                if own:
                    shutil.rmtree(directory, ignore_errors=True)
