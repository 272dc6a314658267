"""Replay-diff: one trajectory, every backend, a canonical snapshot, a deterministic report.

`steadyloop.replay` is a plain package; the function that runs a replay is
[`steadyloop.replay.replay`][steadyloop.replay.replay]. A replay runs in one direction:
load (the selection becomes stores) → drive (the harness runs each case on each store) →
snapshot (a [`Snapshot`][steadyloop.replay.Snapshot] read back) → diff → report, each
stage calling only the stages below it.

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
from steadyloop.replay._backends import (
    EMBEDDED_BACKENDS,
    SERVER_BACKENDS,
    Backend,
    default_backends,
    resolve_backends,
    temporary_backend,
)
from steadyloop.replay._capabilities import required_capabilities
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
from steadyloop.replay._compare import (
    REPORT_DOMAINS,
    CaseReport,
    DifferenceEntry,
    choose_references,
    compare_case,
)
from steadyloop.replay._diff import MISSING, Difference, align_ties, diff, diff_subset
from steadyloop.replay._faults import FAULTS, FaultyStore
from steadyloop.replay._harness import (
    CLOCK_START,
    CLOCK_STEP,
    CaseRun,
    check_steadyloop_limits,
    run_case,
    steadyloop_limits,
)
from steadyloop.replay._journal_store import JOURNAL_CAPABILITIES, JournalStore
from steadyloop.replay._load import known_store_names, resolve_stores
from steadyloop.replay._normalise import JSONBool, JSONFloat, Normaliser, normalise_text, plain
from steadyloop.replay._replay import replay
from steadyloop.replay._report import SCHEMA_VERSION, Report, build_report
from steadyloop.replay._saver import SaverStore
from steadyloop.replay._schema import (
    bundled_cases,
    case_schema,
    pack_cases,
    pack_names,
    report_schema,
)
from steadyloop.replay._snapshot import SECTIONS, Snapshot
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
    "SECTIONS",
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
    "Snapshot",
    "StoreEvent",
    "StoreOpener",
    "StoreSpec",
    "StoredSession",
    "align_ties",
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
