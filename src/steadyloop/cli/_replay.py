"""``steadyloop replay``: run replay cases on several backends and report differences.

Exit codes of ``replay run``: 0 when every backend agrees with every case and with the
reference, 1 on any unexpected difference, 2 on invalid cases or an unreachable backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from steadyloop._errors import (
    BackendUnavailable,
    CaseError,
    MissingExtra,
    SteadyloopError,
    UnknownBackend,
)
from steadyloop.cli._common import (
    EXIT_PROBLEM,
    EXIT_UNUSABLE,
    console,
    err_console,
    json_line,
    printable,
)
from steadyloop.replay import (
    FRAMEWORK_LOGGER,
    Case,
    Report,
    bundled_cases,
    case_schema,
    check_steadyloop_limits,
    default_backends,
    load_cases,
    pack_cases,
    pack_names,
    replay,
    report_schema,
)

__all__ = ["replay_app"]

replay_app = typer.Typer(
    help="Run replay cases on every backend and diff what each one stored.",
    no_args_is_help=True,
)

CASES_ARG = typer.Argument(
    help="Case files or directories of *.jsonl cases; the bundled suite when none is given "
    "(and no --pack).",
    show_default=False,
)

PACK_OPTION = typer.Option(
    "--pack",
    help="Add a case pack shipped with Steadyloop, by name (for example 'hostile').",
)


def _fail(message: str) -> typer.Exit:
    """Print one line of error (never wrapped) and return the exit for unusable input."""
    err_console.print(Text.assemble(("error:", "red"), " ", printable(message)), soft_wrap=True)
    return typer.Exit(EXIT_UNUSABLE)


def _invalid(exc: CaseError) -> typer.Exit:
    """Print each problem of an invalid case on a line of its own; exit 2."""
    for file, line, field, detail in exc.problems:
        where = f"{file}:{line}" if line else file
        problem = f"{where}: field {field or '/'}: {detail}"
        err_console.print(
            Text.assemble(("invalid case", "red"), " ", printable(problem)), soft_wrap=True
        )
    return typer.Exit(EXIT_UNUSABLE)


def _load(paths: list[Path] | None, pack: str | None = None) -> list[Case]:
    try:
        sources: list[Path] = list(paths or ())
        if pack is not None:
            sources.append(pack_cases(pack))
        return load_cases(sources or [bundled_cases()])
    except CaseError as exc:
        raise _invalid(exc) from None


def _unwritable(path: Path, exc: OSError) -> typer.Exit:
    reason = exc.strerror or str(exc)
    err_console.print(
        Text.assemble(
            ("error:", "red"), printable(f" cannot write the report to {path}: {reason}")
        ),
        soft_wrap=True,
    )
    return typer.Exit(EXIT_UNUSABLE)


def _check_writable(path: Path) -> None:
    """Exit 2 with a one-line error unless ``path`` can be written; change nothing there."""
    existed = path.exists()
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise _unwritable(path, exc) from None
    if not existed:
        path.unlink(missing_ok=True)


def _split(values: list[str] | None) -> list[str] | None:
    """The backends named by ``--backends``: ``None`` without the option, else a list."""
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _short(value: object, present: bool, width: int = 48) -> str:
    if not present:
        return "(absent)"
    text = json_line(value, encode=lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True))
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(report: Report) -> Table:
    table = Table(title="Replay: differences per case and backend", show_lines=False)
    table.add_column("case")
    references = set(report.references.values()) or {report.reference}
    for name in report.backends:
        # A line break after each "+" keeps the distinguishing part of a long store
        # name ("openai-agents+" / "sqlite") on a line of its own, and folding (never
        # an ellipsis) shows all of it on a narrow terminal: every column stays told
        # apart from its neighbours.
        label = name.replace("+", "+\n")
        if name in references:
            label += " (ref)"
        table.add_column(Text(label), justify="right", overflow="fold")
    table.add_column("status")
    for case in report.cases:
        cells = []
        for name in report.backends:
            if not case.runs[name].applicable:
                cells.append("[dim]n/a[/dim]")
                continue
            unexpected = sum(1 for d in case.unexpected if d.backend == name)
            allowed = sum(1 for d in case.differences if d.allowed and d.backend == name)
            cell = "[green]0[/green]" if not unexpected else f"[red]{unexpected}[/red]"
            if allowed:
                cell += f" (+{allowed} allowed)"
            cells.append(cell)
        status = {
            "agree": "[green]agree[/green]",
            "differ": "[red]differ[/red]",
            "not_applicable": "[dim]n/a[/dim]",
        }[case.status]
        table.add_row(Text(printable(case.case.case_id)), *cells, status)
    return table


@replay_app.command("run")
def run_command(
    cases: Annotated[list[Path] | None, CASES_ARG] = None,
    *,
    backends: Annotated[
        list[str] | None,
        typer.Option(
            "--backends",
            "-b",
            help="Stores, comma-separated or repeated: memory, sqlite, jsonl, postgres, "
            "redis, mysql, journal URLs, or other frameworks' stores as "
            "FRAMEWORK+BACKEND[://…] (adk+sqlite, trpc+redis://…). Default: memory, sqlite, "
            "jsonl and each server whose STEADYLOOP_<NAME>_URL is set.",
        ),
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option(
            help="The reference of its framework's stores (default: sqlite for Steadyloop's, "
            "a framework's in-memory store for its own, else the first)."
        ),
    ] = None,
    pack: Annotated[str | None, PACK_OPTION] = None,
    report_file: Annotated[
        Path | None, typer.Option("--report", help="Write the JSON report to this file.")
    ] = None,
    timings: Annotated[
        bool, typer.Option("--timings/--no-timings", help="Include the timings section.")
    ] = True,
    keep: Annotated[
        bool, typer.Option(help="Keep each case's namespace and temporary stores.")
    ] = False,
    random_ids: Annotated[
        bool,
        typer.Option(help="Use random ids and the wall clock instead of deterministic ones."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show the frameworks' warnings on standard error as they come (they are "
            "in the report either way).",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Print only the summary line and errors, not the table."
        ),
    ] = False,
) -> None:
    """Run cases on every store, compare snapshots, print a table, write a report.

    Exit status: 0 when something was compared and every store agrees with its
    reference and every case's expectation; 1 when a difference is found; 2 when
    nothing could be compared: a bad case, a store that cannot be opened or reached,
    or a run in which no case compared anything (every store lacking what the cases
    need, or a store alone with no reference).
    """
    loaded = _load(cases, pack)
    if report_file is not None:
        _check_writable(report_file)
    selected = _split(backends)
    if selected is None:
        selected = default_backends()
    elif not selected:
        err_console.print(
            "[red]error:[/red] --backends names no backend; give at least one (memory, "
            "sqlite, jsonl, postgres, redis, mysql or a journal URL), or leave the option "
            "out for the default selection"
        )
        raise typer.Exit(EXIT_UNUSABLE)
    ids: Literal["sequential", "random"] = "random" if random_ids else "sequential"
    with (
        _framework_log(verbose and not quiet),
        Progress(
            TextColumn("[bold]replay[/bold]"),
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as progress,
    ):
        task = progress.add_task("", total=len(loaded) * len(selected))

        def advance(case_id: str, backend: str) -> None:
            progress.update(task, advance=1, description=f"{case_id} on {backend}")

        try:
            report = asyncio.run(
                replay(loaded, selected, reference=reference, keep=keep, ids=ids, progress=advance)
            )
        except CaseError as exc:
            raise _invalid(exc) from None
        except (UnknownBackend, MissingExtra, BackendUnavailable) as exc:
            raise _fail(str(exc)) from None
        except SteadyloopError as exc:
            err_console.print(Text.assemble(("error:", "red"), " ", printable(exc)), soft_wrap=True)
            raise typer.Exit(EXIT_PROBLEM) from None
    if not quiet:
        _details(report)
    _summary(report, verbose=verbose)
    if report_file is not None:
        try:
            report_file.write_text(report.to_json(timings=timings), encoding="utf-8")
        except OSError as exc:
            raise _unwritable(report_file, exc) from None
        console.print(Text(f"report written to {report_file}"))
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEM)
    if not report.compared:
        raise _fail(
            "nothing was compared: every case ran on its reference alone or not at all, "
            "so this run checked nothing; select a store to compare with its reference "
            "(see the capabilities each case needs above)"
        )


@contextlib.contextmanager
def _framework_log(verbose: bool) -> Iterator[None]:
    """Route the frameworks' WARNING records: to standard error with -v, else nowhere."""
    logger = logging.getLogger(FRAMEWORK_LOGGER)
    handler: logging.Handler = _ErrLine() if verbose else logging.NullHandler()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class _ErrLine(logging.Handler):
    """One line on standard error per record, printed as text (never as Rich markup)."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            Text.assemble(("warning:", "yellow"), " ", printable(record.getMessage())),
            soft_wrap=True,
        )


def _details(report: Report) -> None:
    console.print(_table(report))
    # Everything below that comes from data is a Text: printed as it is, never read as
    # Rich markup ("[b]") or emoji codes (":smile:").
    for entry in report.unexpected[:20]:
        console.print(
            Text.assemble(
                ("•", "red"),
                f" {printable(entry.case_id)} ",
                (entry.backend, "bold"),
                printable(
                    f" vs {entry.reference} {entry.pointer}: "
                    f"{_short(entry.reference_value, entry.reference_present)} → "
                    f"{_short(entry.backend_value, entry.backend_present)}"
                ),
            )
        )
    if len(report.unexpected) > 20:
        console.print(Text(f"… and {len(report.unexpected) - 20} more (see the report)"))
    skipped = [
        (case.case.case_id, name, run.missing)
        for case in report.cases
        for name, run in case.runs.items()
        if not run.applicable
    ]
    for case_id, name, missing in skipped[:10]:
        needs = ", ".join(f"{m['capability']} (line {m['line']})" for m in missing)
        console.print(
            Text.assemble(
                ("◦", "dim"), f" {printable(case_id)} ", (name, "bold"), f": needs {needs}"
            )
        )
    if len(skipped) > 10:
        console.print(Text(f"… and {len(skipped) - 10} more not applicable (see the report)"))


def _summary(report: Report, *, verbose: bool) -> None:
    counts = report.counts()
    refs = ", ".join(f"{fw}: {name}" for fw, name in sorted(report.references.items()))
    console.print(
        Text(
            f"{counts['cases_agreeing']}/{counts['cases']} cases agree on "
            f"{', '.join(report.backends)} (reference {refs}); "
            f"{counts['comparisons']} comparison(s) ran, "
            f"{counts['not_applicable']} run(s) not applicable; "
            f"{counts['unexpected']} unexpected, {counts['allowed']} allowed difference(s), "
            f"{counts['tie_allowances']} tie allowance(s)"
        )
    )
    if report.warnings and not verbose:
        console.print(
            Text(
                f"{len(report.warnings)} framework warning(s), in the report's warnings "
                "(-v shows them)"
            )
        )
    if report.workdir is not None:
        console.print(Text(f"temporary stores kept in {report.workdir}"))


@replay_app.command("check")
def check_command(
    cases: Annotated[list[Path] | None, CASES_ARG] = None,
    *,
    pack: Annotated[str | None, PACK_OPTION] = None,
    foreign: Annotated[
        bool,
        typer.Option(
            "--foreign",
            help="The cases are for other frameworks' stores only: skip Steadyloop's limits.",
        ),
    ] = False,
) -> None:
    """Check case files without running them (exit 2 if any is invalid).

    Unless told the cases are for other frameworks' stores only (`--foreign`), this
    also checks Steadyloop's own limits (nesting, id lengths, injections that can
    never fire) by a dry run on a private in-memory journal.
    """
    loaded = _load(cases, pack)
    if not foreign:
        try:
            asyncio.run(check_steadyloop_limits(loaded))
        except CaseError as exc:
            raise _invalid(exc) from None
    for case in loaded:
        count = len(case.operations)
        console.print(
            Text.assemble(("ok", "green"), f" {printable(case.case_id)}: {count} operation(s)")
        )


@replay_app.command("list")
def list_command(pack: Annotated[str | None, PACK_OPTION] = None) -> None:
    """List the bundled cases (or a pack's), and the packs there are."""
    title = "Bundled replay cases" if pack is None else f"Replay cases of the pack {pack!r}"
    table = Table(title=title)
    table.add_column("case")
    table.add_column("ops", justify="right")
    table.add_column("description")
    for case in _load(None, pack) if pack is not None else _load(None):
        table.add_row(
            Text(printable(case.case_id)),
            str(len(case.operations)),
            Text(printable(case.description)),
        )
    console.print(table)
    console.print(Text(f"packs: {', '.join(pack_names())} (run one with --pack NAME)"))


@replay_app.command("schema")
def schema_command(
    which: Annotated[str, typer.Argument(help="'case' or 'report'.")] = "case",
) -> None:
    """Print the JSON Schema of case records or of reports."""
    if which not in ("case", "report"):
        err_console.print("[red]error:[/red] choose 'case' or 'report'")
        raise typer.Exit(EXIT_UNUSABLE)
    schema = case_schema() if which == "case" else report_schema()
    typer.echo(json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True))
