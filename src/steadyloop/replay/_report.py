"""Comparison and the report: every backend against the case, and against a reference.

For each case, every backend's normalised snapshot is compared with the case's
``expected`` (subset semantics; operation errors must be listed exactly), and every
backend but the reference is compared with the reference backend's snapshot in full.
A difference is *allowed* only when the case names its backend and its exact JSON
Pointer; memory hits that tie in score may come in any order, and each time that
allowance is used it is recorded.

The report is deterministic JSON: the same cases on the same backends give the same
bytes. Timings live in a separate ``timings`` section that can be left out; the
report's ``hash`` covers everything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

from steadyloop._errors import BackendUnavailable, CaseError, SteadyloopError, UnknownBackend
from steadyloop.records import canonical_json
from steadyloop.replay._cases import Case
from steadyloop.replay._diff import (
    MISSING,
    Difference,
    align_ties,
    diff,
    diff_subset,
    subset_match,
)
from steadyloop.replay._harness import (
    EMBEDDED_BACKENDS,
    SERVER_BACKENDS,
    Backend,
    CaseRun,
    add_references,
    default_backends,
    make_workdir,
    resolve_stores,
    run_case,
    steadyloop_limits,
)
from steadyloop.replay._journal_store import JournalStore
from steadyloop.replay._normalise import plain
from steadyloop.replay._store import STORE_ENTRY_POINT_GROUP, SessionStore, without_passwords
from steadyloop.replay._warnings import framework_warnings

__all__ = [
    "REPORT_DOMAINS",
    "SCHEMA_VERSION",
    "CaseReport",
    "DifferenceEntry",
    "Report",
    "build_report",
    "check_steadyloop_limits",
    "choose_references",
    "compare_case",
    "known_store_names",
    "replay",
]

SCHEMA_VERSION = 2
"""Version of the report format (``report.schema.json``).

Version 2 added stores of other frameworks: each run names its `framework` and says
whether it ran (`status`, `missing` capabilities), each case lists its `comparisons`
(which store was compared with which reference), and the report names the reference
of every framework (`references`)."""

EXPECTED = "expected"
"""The ``reference`` of a difference found against the case's expectation."""

REPORT_DOMAINS: tuple[str, ...] = (
    "sessions",
    "events",
    "state",
    "summaries",
    "memory",
    "queries",
    "lists",
    "checkpoints",
    "errors",
    "outcomes",
    "loops",
    "threads",
)
"""The domains differences are counted by."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _get(doc: Any, tokens: Sequence[str]) -> Any:
    for token in tokens:
        if isinstance(doc, Mapping) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            return MISSING
    return doc


@dataclass(frozen=True)
class DifferenceEntry:
    """One difference, located.

    Attributes:
        case_id: The case.
        backend: The backend whose snapshot differs.
        reference: ``"expected"`` (the case's expectation) or the reference backend.
        pointer: The JSON Pointer of the difference in the normalised snapshot.
        domain: Which part of the snapshot (one of
            [`REPORT_DOMAINS`][steadyloop.replay.REPORT_DOMAINS]).
        session: The session handle, when the difference is inside a session.
        event_index: The event's index in its list, when inside an event.
        query_id: The memory query, when inside one.
        summary_id: The summary's id, when inside a summary.
        checkpoint: The checkpoint, when inside one.
        reference_value: The value on the reference side (``None`` when absent).
        backend_value: The value on the backend's side (``None`` when absent).
        reference_present: Whether the reference side has a value there.
        backend_present: Whether the backend's side has a value there.
        allowed: Whether the case allows this difference.
        reason: The case's reason, when allowed.
    """

    case_id: str
    backend: str
    reference: str
    pointer: str
    domain: str
    session: str | None
    event_index: int | None
    query_id: str | None
    summary_id: str | None
    checkpoint: str | None
    reference_value: Any
    backend_value: Any
    reference_present: bool
    backend_present: bool
    allowed: bool = False
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the entry as a JSON object."""
        return {
            "case_id": self.case_id,
            "backend": self.backend,
            "reference": self.reference,
            "pointer": self.pointer,
            "domain": self.domain,
            "session": self.session,
            "event_index": self.event_index,
            "query_id": self.query_id,
            "summary_id": self.summary_id,
            "checkpoint": self.checkpoint,
            "reference_value": self.reference_value,
            "backend_value": self.backend_value,
            "reference_present": self.reference_present,
            "backend_present": self.backend_present,
            "allowed": self.allowed,
            "reason": self.reason,
        }


def _locate(
    case_id: str,
    *,
    backend: str,
    reference: str,
    d: Difference,
    left_doc: Any,
    right_doc: Any,
) -> DifferenceEntry:
    tokens = [_unescape(t) for t in d.pointer.split("/")[1:]]
    checkpoint = None
    rest = tokens
    if len(rest) >= 2 and rest[0] == "checkpoints":
        checkpoint = rest[1]
        rest = rest[2:]
    root = rest[0] if rest else ""
    domain = "checkpoints" if checkpoint is not None and not rest else root or "sessions"
    session = event_index = query_id = summary_id = None
    if root == "sessions" and len(rest) >= 2:
        session = rest[1]
        sub = rest[2] if len(rest) >= 3 else ""
        if sub in ("events", "historical_events"):
            domain = "events"
            if len(rest) >= 4 and rest[3].isdigit():
                event_index = int(rest[3])
        elif sub == "state":
            domain = "state"
        elif sub == "summaries":
            domain = "summaries"
            if len(rest) >= 4 and rest[3].isdigit():
                prefix = tokens[: len(tokens) - len(rest) + 4]
                for doc in (left_doc, right_doc):
                    found = _get(doc, prefix)
                    if isinstance(found, Mapping) and isinstance(found.get("id"), str):
                        summary_id = found["id"]
                        break
        else:
            domain = "sessions"
    elif root == "queries" and len(rest) >= 2:
        query_id = rest[1]
    elif root == "lists" and len(rest) >= 2:
        query_id = None
    if domain not in REPORT_DOMAINS:
        domain = "sessions"
    left_present = d.left is not MISSING
    right_present = d.right is not MISSING
    return DifferenceEntry(
        case_id=case_id,
        backend=backend,
        reference=reference,
        pointer=d.pointer,
        domain=domain,
        session=session,
        event_index=event_index,
        query_id=query_id,
        summary_id=summary_id,
        checkpoint=checkpoint,
        reference_value=plain(d.left) if left_present else None,
        backend_value=plain(d.right) if right_present else None,
        reference_present=left_present,
        backend_present=right_present,
    )


@dataclass
class CaseReport:
    """The outcome of one case on every store.

    Attributes:
        case: The case.
        runs: Each store's run, by store name, in selection order.
        differences: Every difference found (allowed ones included).
        tie_allowances: Each use of the memory-score tie allowance.
        snapshot_hashes: SHA-256 of each store's normalised snapshot (runs that did
            not happen have none).
        comparisons: Which comparisons ran: `{"backend", "reference", "status"}`, the
            status one of `compared`, `not_applicable` (the store lacks a capability
            the case needs), `reference_not_applicable` (its reference does) and
            `reference` (the store is the reference itself).
        known_backends: Store names that may appear in an `allowed_diffs` entry
            without being selected (see
            `unused_allowed_diffs` in `to_dict`).
    """

    case: Case
    runs: dict[str, CaseRun]
    differences: list[DifferenceEntry] = field(default_factory=list)
    tie_allowances: list[dict[str, Any]] = field(default_factory=list)
    snapshot_hashes: dict[str, str] = field(default_factory=dict)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    known_backends: frozenset[str] = frozenset()

    @property
    def unexpected(self) -> list[DifferenceEntry]:
        """The differences the case does not allow."""
        return [d for d in self.differences if not d.allowed]

    @property
    def agrees(self) -> bool:
        """Whether no unexpected difference was found."""
        return not self.unexpected

    @property
    def applicable(self) -> bool:
        """Whether the case ran on at least one store."""
        return any(run.applicable for run in self.runs.values())

    @property
    def compared(self) -> bool:
        """Whether anything was compared: a store with its reference or the expectation.

        A case that ran only on a reference (every other store lacking a capability it
        needs) compared nothing, however many stores it ran on.
        """
        if any(c["status"] == "compared" for c in self.comparisons):
            return True
        return not self.case.reference_only and any(
            run.applicable and run.framework == "steadyloop" for run in self.runs.values()
        )

    @property
    def status(self) -> str:
        """`agree`, `differ`, or `not_applicable` (nothing was compared: see `compared`)."""
        if not self.agrees:
            return "differ"
        return "agree" if self.compared else "not_applicable"

    def _unused(self) -> list[dict[str, Any]]:
        used = {(d.backend, d.pointer) for d in self.differences if d.allowed}
        out = []
        for a in self.case.allowed_diffs:
            run = self.runs.get(a.backend)
            if run is not None:
                if not run.applicable or (a.backend, a.pointer) in used:
                    continue
                why = "unused"
            elif a.backend in self.known_backends or (
                "+" in a.backend and a.backend.split("+", 1)[0] + "+*" in self.known_backends
            ):
                continue  # a store this selection did not include
            else:
                why = "unknown_backend"
            out.append({"backend": a.backend, "pointer": a.pointer, "reason": a.reason, "why": why})
        return out

    def to_dict(self) -> dict[str, Any]:
        """Return the case's section of the report.

        `unused_allowed_diffs` lists each allowance no difference used on a store that
        ran the case (`"why": "unused"`), and each naming a store that cannot exist —
        neither selected nor a store name Steadyloop knows (`"why": "unknown_backend"`,
        typically a misspelling).
        """
        return {
            "case_id": self.case.case_id,
            "description": self.case.description,
            "file": Path(self.case.file).name,
            "status": self.status,
            "runs": [
                {
                    "backend": name,
                    "framework": run.framework,
                    "status": "ran" if run.applicable else "not_applicable",
                    "missing": run.missing,
                    "snapshot_hash": self.snapshot_hashes.get(name),
                    "unexpected": sum(1 for d in self.unexpected if d.backend == name),
                    "allowed": sum(1 for d in self.differences if d.allowed and d.backend == name),
                    "injections": run.injections,
                }
                for name, run in self.runs.items()
            ],
            "comparisons": self.comparisons,
            "differences": [d.to_dict() for d in self.differences],
            "tie_allowances": self.tie_allowances,
            "unused_allowed_diffs": self._unused(),
        }


def _align_queries(
    reference: Mapping[str, Any],
    snapshot: dict[str, Any],
    matches: Callable[[Any, Any], bool],
) -> list[str]:
    """Align tied memory hits of ``snapshot`` to ``reference``; return the queries moved."""
    moved: list[str] = []
    ref_queries = reference.get("queries")
    queries = snapshot.get("queries")
    if not isinstance(ref_queries, Mapping) or not isinstance(queries, Mapping):
        return moved
    for qid in sorted(ref_queries):
        ref_q, q = ref_queries[qid], queries.get(qid)
        if not (isinstance(ref_q, Mapping) and isinstance(q, Mapping)):
            continue
        ref_hits, hits = ref_q.get("hits"), q.get("hits")
        if not (isinstance(ref_hits, list) and isinstance(hits, list)) or ref_hits == hits:
            continue
        aligned, did_move = align_ties(ref_hits, hits, matches)
        if did_move:
            queries[qid] = {**q, "hits": aligned}  # type: ignore[index]
            moved.append(qid)
    return moved


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(plain(value)).encode("utf-8")).hexdigest()


def compare_case(
    case: Case,
    runs: Mapping[str, CaseRun],
    reference: str | Mapping[str, str],
    *,
    known_backends: frozenset[str] = frozenset(),
) -> CaseReport:
    """Compare each store's snapshot with the case's expectation and its reference.

    The case's `expected` holds for Steadyloop's own stores, and for every store when
    the case says `expected_everywhere` (a `reference_only` case has none); every
    store is compared in full with its framework's reference store.
    A run that did not happen (a missing capability) is compared with nothing, and a
    store whose reference did not run is compared with nothing but the expectation.

    Args:
        case: The case.
        runs: Its run on each store, by store name, in selection order.
        reference: The reference store's name, or each framework's reference by
            framework (a name alone is the reference of every framework).
        known_backends: Names an `allowed_diffs` entry may use without being selected.
    """
    report = CaseReport(case=case, runs=dict(runs), known_backends=known_backends)
    allowed = {(a.backend, a.pointer): a.reason for a in case.allowed_diffs}
    normalised = {
        name: run.normaliser(run.snapshot) for name, run in runs.items() if run.applicable
    }
    for name, norm in normalised.items():
        report.snapshot_hashes[name] = _digest(norm)
    found: list[DifferenceEntry] = []
    for name, run in runs.items():
        ref = reference if isinstance(reference, str) else reference.get(run.framework, "")
        if not run.applicable:
            report.comparisons.append(
                {"backend": name, "reference": ref, "status": "not_applicable"}
            )
            continue
        if (run.framework == "steadyloop" or case.expected_everywhere) and not case.reference_only:
            found.extend(_against_expected(case, name, run, normalised[name], report))
        if name == ref:
            report.comparisons.append({"backend": name, "reference": ref, "status": "reference"})
            continue
        if ref not in normalised:
            report.comparisons.append(
                {"backend": name, "reference": ref, "status": "reference_not_applicable"}
            )
            continue
        report.comparisons.append({"backend": name, "reference": ref, "status": "compared"})
        unseen = {*run.unseen, *runs[ref].unseen}
        ref_norm = {k: v for k, v in normalised[ref].items() if k not in unseen}
        against_ref = {k: v for k, v in normalised[name].items() if k not in unseen}
        against_ref["queries"] = dict(against_ref.get("queries", {}))
        for qid in _align_queries(ref_norm, against_ref, lambda a, b: bool(a == b)):
            report.tie_allowances.append(
                {
                    "backend": name,
                    "reference": ref,
                    "query_id": qid,
                    "pointer": f"/queries/{qid}/hits",
                }
            )
        found.extend(
            _locate(
                case.case_id,
                backend=name,
                reference=ref,
                d=d,
                left_doc=ref_norm,
                right_doc=against_ref,
            )
            for d in diff(ref_norm, against_ref)
        )
    for entry in found:
        reason = allowed.get((entry.backend, entry.pointer))
        if reason is not None:
            report.differences.append(dataclasses.replace(entry, allowed=True, reason=reason))
        else:
            report.differences.append(entry)
    return report


def _against_expected(
    case: Case, name: str, run: CaseRun, norm: Mapping[str, Any], report: CaseReport
) -> list[DifferenceEntry]:
    expected = run.normaliser(dict(case.expected))
    against_expected = dict(norm)
    against_expected["queries"] = dict(against_expected.get("queries", {}))
    for qid in _align_queries(expected, against_expected, subset_match):
        report.tie_allowances.append(
            {
                "backend": name,
                "reference": EXPECTED,
                "query_id": qid,
                "pointer": f"/queries/{qid}/hits",
            }
        )
    diffs = diff_subset(expected, against_expected)
    listed = expected.get("errors", {}) if isinstance(expected.get("errors"), Mapping) else {}
    for line, value in against_expected.get("errors", {}).items():
        if line not in listed:
            diffs.append(Difference(f"/errors/{line}", MISSING, value))
    for pointer in case.absent:
        found = _get(against_expected, [_unescape(t) for t in pointer.split("/")[1:]])
        if found is not MISSING:
            diffs.append(Difference(pointer, MISSING, found))
    return [
        _locate(
            case.case_id,
            backend=name,
            reference=EXPECTED,
            d=d,
            left_doc=expected,
            right_doc=against_expected,
        )
        for d in diffs
    ]


@dataclass
class Report:
    """The outcome of a replay: every case on every store.

    Attributes:
        reference: The reference of Steadyloop's stores (or, with none selected, of
            the first store's framework).
        backends: The stores, in selection order.
        cases: One [`CaseReport`][steadyloop.replay.CaseReport] per case, in order.
        timings: Seconds: ``total``, ``compare``, and per run.
        workdir: Where temporary stores were kept (only with ``keep``).
        references: Each framework's reference store, by framework.
        frameworks: Each store's framework, by store name.
        warnings: The frameworks' warnings during the run, each `{"source",
            "message"}` (see [`FRAMEWORK_LOGGER`][steadyloop.replay.FRAMEWORK_LOGGER]).
    """

    reference: str
    backends: list[str]
    cases: list[CaseReport]
    timings: dict[str, Any] = field(default_factory=dict)
    workdir: Path | None = None
    references: dict[str, str] = field(default_factory=dict)
    frameworks: dict[str, str] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def differences(self) -> list[DifferenceEntry]:
        """Every difference of every case."""
        return [d for c in self.cases for d in c.differences]

    @property
    def unexpected(self) -> list[DifferenceEntry]:
        """Every difference no case allows."""
        return [d for d in self.differences if not d.allowed]

    @property
    def ok(self) -> bool:
        """Whether every store agreed with every expectation and its reference."""
        return not self.unexpected

    @property
    def compared(self) -> bool:
        """Whether any case compared anything (see [`CaseReport`][steadyloop.replay.CaseReport])."""
        return any(case.compared for case in self.cases)

    def counts(self) -> dict[str, Any]:
        """Return the report's counts."""
        unexpected = self.unexpected
        comparisons = [c for case in self.cases for c in case.comparisons]
        return {
            "cases": len(self.cases),
            "backends": len(self.backends),
            "runs": sum(len(c.runs) for c in self.cases),
            "not_applicable": sum(
                1 for c in self.cases for run in c.runs.values() if not run.applicable
            ),
            "comparisons": sum(1 for c in comparisons if c["status"] == "compared"),
            "cases_agreeing": sum(1 for c in self.cases if c.status == "agree"),
            "differences": len(self.differences),
            "unexpected": len(unexpected),
            "allowed": len(self.differences) - len(unexpected),
            "tie_allowances": sum(len(c.tie_allowances) for c in self.cases),
            "by_domain": {
                domain: sum(1 for d in unexpected if d.domain == domain)
                for domain in REPORT_DOMAINS
            },
            "by_backend": {
                name: sum(1 for d in unexpected if d.backend == name) for name in self.backends
            },
        }

    def to_dict(self, *, timings: bool = True) -> dict[str, Any]:
        """Return the report as JSON; ``timings=False`` leaves the timings section out."""
        body: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": "steadyloop.replay.report",
            "ok": self.ok,
            "reference": self.reference,
            "references": dict(self.references) or {"steadyloop": self.reference},
            "backends": list(self.backends),
            "frameworks": {b: self.frameworks.get(b, "steadyloop") for b in self.backends},
            "counts": self.counts(),
            "cases": [c.to_dict() for c in self.cases],
        }
        body["hash"] = hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
        if timings:
            body["timings"] = self.timings
        if self.warnings:
            body["warnings"] = [dict(w) for w in self.warnings]
        return body

    def to_json(self, *, timings: bool = True) -> str:
        """Return the report as canonical JSON text (sorted keys), newline-terminated."""
        return canonical_json(self.to_dict(timings=timings)) + "\n"


def choose_references(
    stores: Sequence[tuple[str, str, str]], reference: str | None = None
) -> dict[str, str]:
    """Pick each framework's reference store.

    Steadyloop's stores are compared with `sqlite` when it is selected; every other
    framework's with its in-memory store (backend `memory`); failing that, with the
    framework's first store. `reference`, when given, is the reference of its own
    framework.

    Args:
        stores: `(name, framework, backend)` of each store, in selection order.
        reference: A store name that overrides its framework's default.

    Raises:
        UnknownBackend: `reference` is not among the stores.
    """
    out: dict[str, str] = {}
    for _, framework, _ in stores:
        if framework in out:
            continue
        same = [(n, b) for n, f, b in stores if f == framework]
        preferred = "sqlite" if framework == "steadyloop" else "memory"
        key = "name" if framework == "steadyloop" else "backend"
        pick = next((n for n, b in same if (n if key == "name" else b) == preferred), same[0][0])
        out[framework] = pick
    if reference is not None:
        owner = next((f for n, f, _ in stores if n == reference), None)
        if owner is None:
            names = [n for n, _, _ in stores]
            raise UnknownBackend(f"the reference backend {reference!r} is not among {names}")
        out[owner] = reference
    return out


def build_report(
    cases: Sequence[Case],
    runs: Mapping[tuple[str, str], CaseRun],
    backends: Sequence[str],
    reference: str | Mapping[str, str],
    *,
    known_backends: frozenset[str] = frozenset(),
) -> Report:
    """Compare the runs of every case and assemble the report.

    Args:
        cases: The cases, in order.
        runs: Each run, by ``(case_id, store)``.
        backends: The store names, in order.
        reference: The reference store, or each framework's (see
            [`compare_case`][steadyloop.replay.compare_case]).
        known_backends: Names an `allowed_diffs` entry may use without being selected.
    """
    started = time.perf_counter()
    reports = [
        compare_case(
            case,
            {b: runs[(case.case_id, b)] for b in backends},
            reference,
            known_backends=known_backends,
        )
        for case in cases
    ]
    compare = time.perf_counter() - started
    timings = {
        "compare_seconds": round(compare, 6),
        "runs": [
            {"case_id": c.case_id, "backend": b, "seconds": round(runs[(c.case_id, b)].seconds, 6)}
            for c in cases
            for b in backends
        ],
    }
    frameworks = {b: runs[(cases[0].case_id, b)].framework for b in backends} if cases else {}
    if isinstance(reference, str):
        references = {f: reference for f in sorted(set(frameworks.values()) or {"steadyloop"})}
        main = reference
    else:
        references = dict(reference)
        main = references.get("steadyloop") or next(iter(references.values()), "")
    return Report(
        reference=main,
        backends=list(backends),
        cases=reports,
        timings=timings,
        references=references,
        frameworks=frameworks,
    )


def known_store_names() -> frozenset[str]:
    """Store names that may be named in `allowed_diffs` without being selected.

    Steadyloop's backend names, and `FRAMEWORK+BACKEND` for each framework an installed
    package registers, are recognised; an unselected name outside these is reported.
    """
    names = {*EMBEDDED_BACKENDS, *SERVER_BACKENDS}
    frameworks = {ep.name for ep in entry_points(group=STORE_ENTRY_POINT_GROUP)}
    return frozenset(names | {f"{f}+*" for f in frameworks})


async def check_steadyloop_limits(cases: Sequence[Case]) -> None:
    """Refuse cases holding what Steadyloop's own stores refuse, before anything runs.

    `replay()` calls this whenever a Steadyloop store is
    selected (see [`steadyloop_limits`][steadyloop.replay.steadyloop_limits]).

    Raises:
        CaseError: With every problem of every case in `problems`.
    """
    problems = [p for case in cases for p in await steadyloop_limits(case)]
    if problems:
        file, line, where, detail = problems[0]
        raise CaseError(file, line, where, detail, problems=problems)


async def _probe(store: SessionStore) -> None:
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


async def replay(
    cases: Sequence[Case],
    backends: Sequence[str | Backend | SessionStore] | None = None,
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
            (`FRAMEWORK+BACKEND[://…]`), [`Backend`][steadyloop.replay.Backend] or
            [`SessionStore`][steadyloop.replay.SessionStore] objects; by default
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
                await _probe(store)
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
