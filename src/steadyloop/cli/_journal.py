"""``steadyloop journal``: show a journal's records and check its integrity."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from steadyloop._errors import CopyRefused, CorruptionError, SessionError, UnknownBackend
from steadyloop.cli._common import (
    EXIT_PROBLEM,
    EXIT_UNUSABLE,
    console,
    err_console,
    json_line,
    printable,
    run_async,
)
from steadyloop.journal import (
    CopyReport,
    Journal,
    JSONLJournal,
    copy_journal,
    open_journal,
    parse_url,
    redact_url,
)
from steadyloop.journal._sql import PlanJournal, table_exists_plan
from steadyloop.loop import (
    RemovalReport,
    check_session_copies,
    erase_user,
    load_run,
    parse_run_stream,
    prune_runs,
)
from steadyloop.records import INTENT_KIND, RESULT_KIND, StoredRecord, canonical_json
from steadyloop.sessions import parse_session_stream, user_stream
from steadyloop.sessions._fold import scope_snapshot_problems, snapshot_problems
from steadyloop.sessions._streams import parse_scope_stream

__all__ = ["Finding", "diagnose", "journal_app"]

journal_app = typer.Typer(
    help="Inspect a journal: show its records, check its integrity, copy, prune, erase."
)

URL_ARG = typer.Argument(help="Journal URL, e.g. sqlite:runs.db or jsonl:///var/lib/runs.")


def _time(us: int) -> str:
    stamp = dt.datetime.fromtimestamp(us / 1_000_000, tz=dt.UTC)
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _short(value: object, width: int = 80) -> str:
    text = json_line(value, encode=lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True))
    return text if len(text) <= width else text[: width - 1] + "…"


@journal_app.command("show")
def show(
    url: Annotated[str, URL_ARG],
    stream: Annotated[str | None, typer.Argument(help="Only this stream.")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this namespace.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one canonical JSON object per record.")
    ] = False,
) -> None:
    """Print the records of a journal, stream by stream, in sequence order."""
    run_async(_show, url, stream, namespace, as_json)


async def _show(url: str, stream: str | None, namespace: str | None, as_json: bool) -> None:
    async with await open_journal(url, create=False) as journal:
        namespaces = [namespace] if namespace else await journal.namespaces()
        shown = 0
        for ns in namespaces:
            streams = await journal.streams(ns)
            for name in [s for s in streams if stream is None or s == stream]:
                records = await journal.read(ns, name)
                shown += len(records)
                if as_json:
                    for r in records:
                        line = {"namespace": ns, "stream": name, "seq": r.seq, **r.record.to_dict()}
                        typer.echo(json_line(line, encode=canonical_json))
                    continue
                table = Table(
                    title=Text(f"{printable(ns)} / {printable(name)}"),
                    title_justify="left",
                    expand=False,
                )
                for col in ("seq", "time (UTC)", "kind", "id", "payload"):
                    table.add_column(col, overflow="fold")
                for r in records:
                    cells = (str(r.seq), _time(r.record.time), r.kind, r.record.id)
                    table.add_row(*(Text(printable(c)) for c in (*cells, _short(r.payload))))
                console.print(table)
        if not shown and not as_json:
            console.print(Text(f"no records in {printable(redact_url(url))}"))


@dataclass(frozen=True)
class Finding:
    """One thing ``doctor`` noticed.

    Attributes:
        severity: ``"error"`` (the journal is damaged) or ``"warning"``.
        what: A short code: ``corruption``, ``torn-tail``, ``unchecked``,
            ``open-intent``, ``copy-mismatch``, ``snapshot-mismatch``,
            ``intent-mismatch``.
        location: Where: file and line, table and key, or namespace/stream/seq.
        detail: What exactly was found.
    """

    severity: str
    what: str
    location: str
    detail: str


async def diagnose(journal: Journal) -> list[Finding]:
    """Check every stream of a journal and return what was found.

    Looks for corruption (unreadable records, sequence gaps, broken batches, JSONL
    batches that do not match their check), torn tails of file backends, JSONL batches
    written before checksums (unchecked), intents without a result (an effect that may
    or may not have happened: resuming such a run must decide, not guess), run
    results that differ from the session events copying them, run and session
    snapshots that do not hold the fold of the records before them, and tool intents
    that do not ask for the tool call the model's reply made.
    """
    findings: list[Finding] = []
    for ns in await journal.namespaces():
        if isinstance(journal, JSONLJournal):
            readable = _readable(journal, ns)
            unchecked = journal.unchecked_batches(ns) if readable else 0
            if unchecked:
                findings.append(
                    Finding(
                        "warning",
                        "unchecked",
                        journal.namespace_path(ns),
                        f"{unchecked} batch(es) written before checksums (a version 1 "
                        "file) carry no check: an edit to them cannot be detected",
                    )
                )
            torn = journal.torn_tail(ns) if readable else None
            if torn:
                findings.append(
                    Finding(
                        "warning",
                        "torn-tail",
                        torn.split(": ", 1)[0],
                        torn.split(": ", 1)[1]
                        + "; it is ignored on read and cut before the next append",
                    )
                )
        try:
            streams = await journal.streams(ns)
        except CorruptionError as exc:
            findings.append(Finding("error", "corruption", exc.location, exc.detail))
            continue
        for name in streams:
            try:
                records = await journal.read(ns, name)
            except CorruptionError as exc:
                findings.append(Finding("error", "corruption", exc.location, exc.detail))
                continue
            findings.extend(_open_intents(ns, name, records))
            if parse_run_stream(name) is not None and records:
                findings.extend(await _copies(journal, ns, name, records))
            elif parse_session_stream(name) is not None:
                findings.extend(_session_snapshots(ns, name, records))
            else:
                findings.extend(_scope_state(ns, name, records))
    return findings


def _session_snapshots(ns: str, stream: str, records: list[StoredRecord]) -> list[Finding]:
    """A session stream that does not fold, or snapshots not holding the fold before them."""
    parsed = parse_session_stream(stream)
    if parsed is None:
        return []
    try:
        problems = snapshot_problems(ns, *parsed, records)
    except CorruptionError as exc:
        return [Finding("error", "corruption", exc.location, exc.detail)]
    findings = []
    for problem in problems:
        where, _, detail = problem.partition(": ")
        findings.append(Finding("error", "snapshot-mismatch", where, detail))
    return findings


def _scope_state(ns: str, stream: str, records: list[StoredRecord]) -> list[Finding]:
    """A user or app state stream that does not fold, or its snapshots that do not match."""
    scope = parse_scope_stream(stream)
    if scope is None:
        return []
    try:
        problems = scope_snapshot_problems(ns, records, scope)
    except CorruptionError as exc:
        return [Finding("error", "corruption", exc.location, exc.detail)]
    findings = []
    for problem in problems:
        where, _, detail = problem.partition(": ")
        findings.append(Finding("error", "snapshot-mismatch", where, detail))
    return findings


async def _copies(
    journal: Journal, ns: str, stream: str, records: list[StoredRecord]
) -> list[Finding]:
    """The run's results that differ from the session events copying them."""
    run_id = parse_run_stream(stream)
    assert run_id is not None
    try:
        info = await load_run(journal, ns, run_id)
        mismatches = await check_session_copies(journal, info)
    except (CorruptionError, SessionError) as exc:
        location = exc.location if isinstance(exc, CorruptionError) else f"{ns}/{stream}"
        detail = exc.detail if isinstance(exc, CorruptionError) else str(exc)
        return [Finding("error", "corruption", location, detail)]
    findings = [Finding("error", "copy-mismatch", m.location, m.detail) for m in mismatches]
    for problem in info.state.snapshot_problems:
        where, _, detail = problem.partition(": ")
        findings.append(Finding("error", "snapshot-mismatch", where, detail))
    for problem in info.state.intent_problems:
        where, _, detail = problem.partition(": ")
        findings.append(Finding("error", "intent-mismatch", where, detail))
    return findings


def _readable(journal: JSONLJournal, namespace: str) -> bool:
    try:
        journal.torn_tail(namespace)
    except CorruptionError:
        return False
    return True


def _open_intents(ns: str, stream: str, records: list[StoredRecord]) -> list[Finding]:
    open_: dict[str, StoredRecord] = {}
    for r in records:
        intent_id = r.payload.get("intent_id")
        if r.kind == INTENT_KIND and isinstance(intent_id, str):
            open_[intent_id] = r
        elif r.kind == RESULT_KIND and isinstance(intent_id, str):
            open_.pop(intent_id, None)
    return [
        Finding(
            "warning",
            "open-intent",
            f"{ns}/{stream}#{r.seq}",
            f"intent {iid!r} ({_short(dict(r.payload), 60)}) has no result: "
            "the effect may or may not have happened",
        )
        for iid, r in open_.items()
    ]


@journal_app.command("doctor")
def doctor(url: Annotated[str, URL_ARG]) -> None:
    """Check a journal's integrity; exit 1 if it is corrupted, 2 if it cannot be opened."""
    findings = run_async(_doctor, url)
    if not findings:
        console.print(f"[green]ok[/green]: {escape(printable(redact_url(url)))} has no problems")
        return
    table = Table(title=Text(f"doctor: {printable(redact_url(url))}"), title_justify="left")
    for col in ("severity", "what", "location", "detail"):
        table.add_column(col, overflow="fold")
    for f in findings:
        colour = "red" if f.severity == "error" else "yellow"
        severity = Text(f.severity, style=colour)
        cells = (f.what, f.location, f.detail)
        table.add_row(severity, *(Text(printable(c)) for c in cells))
    console.print(table)
    errors = sum(f.severity == "error" for f in findings)
    console.print(f"{errors} error(s), {len(findings) - errors} warning(s)")
    if errors:
        raise typer.Exit(EXIT_PROBLEM)


async def _doctor(url: str) -> list[Finding]:
    async with await open_journal(url, create=False) as journal:
        return await diagnose(journal)


def _family(url: str) -> str | None:
    """The backend family a journal URL names, or None for one no backend knows."""
    try:
        return parse_url(url).family
    except UnknownBackend:
        return None


@journal_app.command("copy")
def copy(
    source: Annotated[str, typer.Argument(help="The journal to copy from (only read).")],
    destination: Annotated[str, typer.Argument(help="The journal to copy to; created if missing.")],
    merge: Annotated[
        bool,
        typer.Option(
            "--merge", help="Allow a destination that holds other streams; they are kept."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Copy every stream, record and idempotency key of SOURCE into DESTINATION, verified.

    A copy that was killed is finished by running it again. Exit 0: both sides hold the
    same; 1: they differ after the copy; 2: bad input (an unknown or unreachable URL,
    a destination that collides with the source).
    """
    for url in (source, destination):
        if _family(url) == "memory":
            err_console.print(
                f"[red]error:[/red] {escape(printable(url))}: a memory journal lives in one "
                "process; copy it through the API (steadyloop.journal.copy_journal)"
            )
            raise typer.Exit(EXIT_UNUSABLE)
    if redact_url(source) == redact_url(destination):
        err_console.print(
            f"[red]error:[/red] {escape(printable(redact_url(source)))}: source and "
            "destination are the same journal"
        )
        raise typer.Exit(EXIT_UNUSABLE)
    report = run_async(_copy, source, destination, merge)
    if as_json:
        typer.echo(json_line(report.to_dict(), encode=canonical_json))
    else:
        console.print(
            Text(
                f"{redact_url(source)} -> {redact_url(destination)}: {report.streams} stream(s) "
                f"in {report.namespaces} namespace(s); {report.records_copied} record(s) and "
                f"{report.keys_copied} key(s) copied, {report.records_present} record(s) and "
                f"{report.keys_present} key(s) already there"
            )
        )
        for line in report.differences:
            console.print(Text(f"difference: {printable(line)}", style="red"))
        if not report.differences:
            console.print("[green]ok[/green]: both journals hold the same records and keys")
    if report.differences:
        raise typer.Exit(EXIT_PROBLEM)


async def _copy(source: str, destination: str, merge: bool) -> CopyReport:
    async with await open_journal(source, create=False) as src:
        async with await open_journal(destination) as dst:
            try:
                report = await copy_journal(src, dst, merge=merge)
            except CopyRefused as exc:
                err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
                raise typer.Exit(EXIT_UNUSABLE) from None
            if await _has_audit_queue(src):
                err_console.print(
                    "note: the audit queue's own tables (claims, leases, priorities) are not "
                    "copied, only the task trails; see the how-to 'Move to PostgreSQL'"
                )
            return report


async def _has_audit_queue(journal: Journal) -> bool:
    """Whether a SQL journal's database holds the audit queue's tables next to it."""
    if not isinstance(journal, PlanJournal):
        return False
    dialect = journal.dialect
    found: bool = await journal.run_plan(
        lambda: table_exists_plan(dialect, "audit_tasks"), write=False
    )
    return found


_DURATION = re.compile(r"^(\d+)([dhm])$")


def parse_cutoff(text: str, now: dt.datetime | None = None) -> int:
    """A cutoff in microseconds since the epoch, from ``30d``/``12h``/``90m`` or ISO 8601.

    A date or time without a zone is UTC.

    Raises:
        ValueError: Neither form.
    """
    match = _DURATION.match(text.strip())
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        span = {"d": dt.timedelta(days=amount), "h": dt.timedelta(hours=amount)}.get(
            unit, dt.timedelta(minutes=amount)
        )
        stamp = (now or dt.datetime.now(dt.UTC)) - span
    else:
        try:
            stamp = dt.datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"--before {text!r} is neither a duration (30d, 12h, 90m) nor an ISO 8601 "
                "date or time (2026-01-31, 2026-01-31T12:00:00Z)"
            ) from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
    return int(stamp.timestamp()) * 1_000_000 + stamp.microsecond


def _print_removal(report: RemovalReport, as_json: bool, url: str, verb: str) -> None:
    if as_json:
        typer.echo(json_line(report.to_dict(), encode=canonical_json))
        return
    table = Table(
        title=Text(f"{'would remove' if report.dry_run else verb}: {printable(redact_url(url))}"),
        title_justify="left",
    )
    for col in ("namespace", "stream", "what", "records", "last record (UTC)"):
        table.add_column(col, overflow="fold")
    for r in report.removed:
        cells = (r.namespace, r.stream, r.why, str(r.records), _time(r.time))
        table.add_row(*(Text(printable(c)) for c in cells))
    if report.removed:
        console.print(table)
    for line in report.kept:
        console.print(Text(f"kept: {printable(line)}", style="yellow"))
    for line in report.cleared:
        console.print(Text(f"cleared: {printable(line)}"))
    done = "would be removed" if report.dry_run else "removed"
    console.print(Text(f"{len(report.removed)} stream(s), {report.records} record(s) {done}"))
    if report.reclaimed:
        console.print(Text(printable(report.reclaimed)))


@journal_app.command("prune")
def prune(
    url: Annotated[str, URL_ARG],
    before: Annotated[
        str,
        typer.Option(
            "--before",
            help="Remove finished runs whose last record is older: 30d, 12h, 90m, or an "
            "ISO 8601 date/time (UTC when no zone is given).",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this app.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Remove finished runs older than a cutoff, then give the space back.

    Never removes a run that has not ended, one with an intent without a result, or one
    an audit task's trail names. Exit 0 when done; 2 on bad input.
    """
    try:
        cutoff = parse_cutoff(before)
    except ValueError as exc:
        err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    report = run_async(_prune, url, cutoff, dry_run, namespace)
    _print_removal(report, as_json, url, "removed")


async def _prune(url: str, cutoff: int, dry_run: bool, namespace: str | None) -> RemovalReport:
    async with await open_journal(url, create=False) as journal:
        return await prune_runs(journal, cutoff, dry_run=dry_run, namespace=namespace)


@journal_app.command("erase")
def erase(
    url: Annotated[str, URL_ARG],
    user: Annotated[str, typer.Option("--user", help="The user id whose data goes.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only report what would be removed.")
    ] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only this app.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Remove everything stored about one user: sessions, state, memory, runs.

    The ``app:`` changes their sessions made stay, cleared of the user's name. Exit 0
    when everything went; 1 when something was kept (a run a live driver holds, or an
    app stream written during the erasure); 2 on bad input.
    """
    try:
        user_stream(user)
    except SessionError as exc:
        err_console.print(f"[red]error:[/red] --user: {escape(printable(exc))}")
        raise typer.Exit(EXIT_UNUSABLE) from None
    report = run_async(_erase, url, user, dry_run, namespace)
    _print_removal(report, as_json, url, "erased")
    if any(w in k for k in report.kept for w in ("live driver", "by hand", "erase again")):
        raise typer.Exit(EXIT_PROBLEM)


async def _erase(url: str, user: str, dry_run: bool, namespace: str | None) -> RemovalReport:
    async with await open_journal(url, create=False) as journal:
        return await erase_user(journal, user, dry_run=dry_run, namespace=namespace)
