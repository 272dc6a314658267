"""Replay-diff: one trajectory, every backend, a canonical snapshot, a deterministic report.

Cases are JSONL files in a small operation language (`steadyloop.replay._cases`
documents it; ``case.schema.json`` is its JSON Schema). The harness runs every case on
every selected backend, reads back what was stored, normalises representation only,
and compares each backend with the case's expectation and with a reference backend.

Examples:
    >>> import asyncio
    >>> from steadyloop.replay import bundled_cases, load_cases, replay
    >>> cases = load_cases([bundled_cases() / "single_turn.jsonl"])
    >>> report = asyncio.run(replay(cases, ["memory", "sqlite"]))
    >>> report.ok, report.counts()["unexpected"]
    (True, 0)
"""

from steadyloop._errors import CaseError, MissingExtra
from steadyloop.replay._cases import (
    DOMAINS,
    ERROR_NAMES,
    AllowedDiff,
    Case,
    CaseHeader,
    Operation,
    case_record_adapter,
    load_case,
    load_cases,
    parse_case,
)
from steadyloop.replay._diff import MISSING, Difference, align_ties, diff, diff_subset
from steadyloop.replay._faults import FAULTS, FaultyStore
from steadyloop.replay._harness import (
    CLOCK_START,
    CLOCK_STEP,
    EMBEDDED_BACKENDS,
    SERVER_BACKENDS,
    Backend,
    CaseRun,
    as_store,
    default_backends,
    required_capabilities,
    resolve_backends,
    resolve_stores,
    run_case,
    steadyloop_limits,
    temporary_backend,
)
from steadyloop.replay._journal_store import JOURNAL_CAPABILITIES, JournalStore
from steadyloop.replay._normalise import JSONBool, JSONFloat, Normaliser, normalise_text, plain
from steadyloop.replay._report import (
    REPORT_DOMAINS,
    SCHEMA_VERSION,
    CaseReport,
    DifferenceEntry,
    Report,
    build_report,
    check_steadyloop_limits,
    choose_references,
    compare_case,
    known_store_names,
    replay,
)
from steadyloop.replay._saver import SaverStore
from steadyloop.replay._schema import (
    bundled_cases,
    case_schema,
    pack_cases,
    pack_names,
    report_schema,
)
from steadyloop.replay._store import (
    MAX_CASE_TIME_US,
    SCOPE_NAMES,
    STORE_ENTRY_POINT_GROUP,
    Capability,
    EventEdit,
    Outcome,
    SessionRef,
    SessionStore,
    StoredSession,
    StoreEvent,
    StoreOpener,
    StoreSpec,
    missing_extra,
    parse_store_url,
    scope_of,
    seconds_to_us,
    store_opener,
    us_to_seconds,
    without_passwords,
)
from steadyloop.replay._warnings import FRAMEWORK_LOGGER

__all__ = [
    "CLOCK_START",
    "CLOCK_STEP",
    "DOMAINS",
    "EMBEDDED_BACKENDS",
    "ERROR_NAMES",
    "FAULTS",
    "FRAMEWORK_LOGGER",
    "JOURNAL_CAPABILITIES",
    "MAX_CASE_TIME_US",
    "MISSING",
    "REPORT_DOMAINS",
    "SCHEMA_VERSION",
    "SCOPE_NAMES",
    "SERVER_BACKENDS",
    "STORE_ENTRY_POINT_GROUP",
    "AllowedDiff",
    "Backend",
    "Capability",
    "Case",
    "CaseError",
    "CaseHeader",
    "CaseReport",
    "CaseRun",
    "Difference",
    "DifferenceEntry",
    "EventEdit",
    "FaultyStore",
    "JSONBool",
    "JSONFloat",
    "JournalStore",
    "MissingExtra",
    "Normaliser",
    "Operation",
    "Outcome",
    "Report",
    "SaverStore",
    "SessionRef",
    "SessionStore",
    "StoreEvent",
    "StoreOpener",
    "StoreSpec",
    "StoredSession",
    "align_ties",
    "as_store",
    "build_report",
    "bundled_cases",
    "case_record_adapter",
    "case_schema",
    "check_steadyloop_limits",
    "choose_references",
    "compare_case",
    "default_backends",
    "diff",
    "diff_subset",
    "known_store_names",
    "load_case",
    "load_cases",
    "missing_extra",
    "normalise_text",
    "pack_cases",
    "pack_names",
    "parse_case",
    "parse_store_url",
    "plain",
    "replay",
    "report_schema",
    "required_capabilities",
    "resolve_backends",
    "resolve_stores",
    "run_case",
    "scope_of",
    "seconds_to_us",
    "steadyloop_limits",
    "store_opener",
    "temporary_backend",
    "us_to_seconds",
    "without_passwords",
]
