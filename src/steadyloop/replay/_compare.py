"""Diff: every store's snapshot against the case's expectation, and against a reference.

For each case, every backend's normalised snapshot is compared with the case's
``expected`` (subset semantics; operation errors must be listed exactly), and every
backend but the reference is compared with the reference backend's snapshot in full.
A difference is *allowed* only when the case names its backend and its exact JSON
Pointer; memory hits that tie in score may come in any order, and each time that
allowance is used it is recorded.

This stage takes what the harness gives back (a [`CaseRun`][steadyloop.replay.CaseRun]
holding a [`Snapshot`][steadyloop.replay.Snapshot]) and gives the report a
[`CaseReport`][steadyloop.replay.CaseReport] per case; it calls nothing above it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyloop._errors import UnknownBackend
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
from steadyloop.replay._harness import CaseRun
from steadyloop.replay._normalise import plain
from steadyloop.replay._snapshot import SECTIONS

__all__ = [
    "EXPECTED",
    "REPORT_DOMAINS",
    "SESSION_PARTS",
    "CaseReport",
    "DifferenceEntry",
    "choose_references",
    "compare_case",
]

EXPECTED = "expected"
"""The ``reference`` of a difference found against the case's expectation."""

SESSION_PARTS: tuple[str, ...] = ("events", "state", "summaries")
"""The parts of a session a difference is counted by, apart from the session itself."""

REPORT_DOMAINS: tuple[str, ...] = (SECTIONS[0], *SESSION_PARTS, *SECTIONS[1:])
"""The domains differences are counted by: the snapshot's sections, a session's parts after
``sessions`` (see [`SECTIONS`][steadyloop.replay.SECTIONS])."""


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
        name: run.normaliser(run.snapshot.to_dict()) for name, run in runs.items() if run.applicable
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
