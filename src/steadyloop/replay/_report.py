"""Report: every case's comparison, counted, as deterministic JSON.

The last stage of a replay: it takes the runs the harness gave back, has the diff stage
([`compare_case`][steadyloop.replay.compare_case]) compare each case, and assembles the
[`Report`][steadyloop.replay.Report].

The report is deterministic JSON: the same cases on the same backends give the same
bytes. Timings live in a separate ``timings`` section that can be left out; the
report's ``hash`` covers everything else.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steadyloop.records import canonical_json
from steadyloop.replay._cases import Case
from steadyloop.replay._compare import REPORT_DOMAINS, CaseReport, DifferenceEntry, compare_case
from steadyloop.replay._harness import CaseRun

__all__ = ["SCHEMA_VERSION", "Report", "build_report"]

SCHEMA_VERSION = 2
"""Version of the report format (``report.schema.json``).

Version 2 added stores of other frameworks: each run names its `framework` and says
whether it ran (`status`, `missing` capabilities), each case lists its `comparisons`
(which store was compared with which reference), and the report names the reference
of every framework (`references`)."""


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
