"""``steadyloop journal``: show a journal's records and check its integrity."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from steadyloop._errors import CopyRefused, CorruptionError, SessionError
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
    redact_url,
)
from steadyloop.loop import check_session_copies, load_run, parse_run_stream
from steadyloop.records import INTENT_KIND, RESULT_KIND, StoredRecord, canonical_json
from steadyloop.sessions import parse_session_stream
from steadyloop.sessions._fold import snapshot_problems
from steadyloop.sessions._streams import KIND_SNAPSHOT

__all__ = ["Finding", "diagnose", "journal_app"]

journal_app = typer.Typer(
    help="Inspect a journal: show its records, check its integrity, copy it elsewhere."
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
            ``open-intent``, ``copy-mismatch``, ``snapshot-mismatch``.
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
    results that differ from the session events copying them, and run and session
    snapshots that do not hold the fold of the records before them.
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
            elif any(r.kind == KIND_SNAPSHOT for r in records):
                findings.extend(_session_snapshots(ns, name, records))
    return findings


def _session_snapshots(ns: str, stream: str, records: list[StoredRecord]) -> list[Finding]:
    """The session snapshots that do not hold the fold of the records before them."""
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
        if url.split(":", 1)[0].lower() == "memory":
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
                return await copy_journal(src, dst, merge=merge)
            except CopyRefused as exc:
                err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
                raise typer.Exit(EXIT_UNUSABLE) from None
