"""``steadyloop run``, ``steadyloop resume`` and ``steadyloop runs …``: drive and inspect runs.

Exit codes of ``run``, ``resume`` and ``runs resolve`` (the CLI reference lists them):

* 0 — the run completed (``resolve``: the decision is recorded);
* 1 — the run ended otherwise (``budget_exhausted``, ``parse_failures``,
  ``cancelled``, ``error``), or it is finished, busy, or its journal is damaged;
* 2 — the command could not run: an agent that does not import, an unknown run id,
  bad options, an unreachable journal; or the journal failed under the run (a full
  disk): the error line ends with the command that resumes it;
* 3 — ``resume_state_unknown``: a never-repeat effect may or may not have happened;
  decide with ``steadyloop runs resolve``;
* 130 (Ctrl-C) or 143 (SIGTERM) — the run stopped on the signal and can be resumed
  (the command to do so is printed).

The first Ctrl-C or SIGTERM stops the run at its next write boundary (the effect in
flight finishes and its result is written); a second one stops at once (the effect in
flight is abandoned, its intent left open). Either way nothing is cancelled:
cancelling is ``steadyloop runs cancel``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from steadyloop._errors import AgentLoadError, BackendUnavailable, RunNotFound
from steadyloop.cli._common import (
    EXIT_DECIDE,
    EXIT_PROBLEM,
    EXIT_UNUSABLE,
    console,
    err_console,
    exit_for_signal,
    json_line,
    printable,
    run_async,
)
from steadyloop.cli._journal import _short, _time
from steadyloop.journal import open_journal, redact_url
from steadyloop.loop import (
    Agent,
    Happened,
    NotHappened,
    RunInfo,
    RunResult,
    SignalStop,
    StopReason,
    load_agent,
    load_run,
    request_cancel,
    resolve,
    resume,
    run,
    run_keys,
)

__all__ = ["resume_command", "run_command", "runs_app"]

T = TypeVar("T")

runs_app = typer.Typer(help="Inspect runs: list them, show one, resolve or cancel it.")

JOURNAL_OPT = typer.Option(
    "--journal", "-j", help="Journal URL (default: $STEADYLOOP_JOURNAL or sqlite:steadyloop.db)."
)
APP_OPT = typer.Option("--app", "-a", help="The app: the journal namespace of the run.")
JSON_OPT = typer.Option("--json", help="Print JSON instead of a table.")


# How `run` and `resume` name the agent, in their help and in the hint `runs resolve`
# prints: the same words as the tutorial's `shop:agent` and AgentLoadError's message.
AGENT_METAVAR = "MODULE:ATTRIBUTE"
AGENT_HELP = (
    "The agent to import, as module:attribute: shop:agent is the attribute agent of shop.py."
)


def _agent(path: str) -> Agent:
    """Import ``module:attribute`` (from the working directory too), or exit 2."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_agent(path)
    except AgentLoadError as exc:
        err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
        raise typer.Exit(EXIT_UNUSABLE) from None


def _call(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Like ``run_async``, with an unknown run id as bad input (exit 2)."""

    async def guarded() -> T:
        try:
            return await fn(*args)
        except RunNotFound as exc:
            err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
            raise typer.Exit(EXIT_UNUSABLE) from None

    return run_async(guarded)


def _resume_hint(run_id: str, agent: str, journal: str | None, app: str) -> str:
    """The exact command that resumes a run (the journal's password, if any, elided)."""
    words = ["steadyloop", "resume", run_id, "--agent", agent]
    if journal is not None:
        words += ["--journal", redact_url(journal)]
    if app != "default":
        words += ["--app", app]
    return shlex.join(words)


def _say_stopping(signum: int) -> None:
    """Tell the person at the terminal what the first signal does (from its handler)."""
    if signum == signal.SIGINT:
        name, again = "Ctrl-C", "press Ctrl-C again"
    else:
        name = signal.Signals(signum).name
        again = f"a second {name} or Ctrl-C stops"
    sys.stderr.write(
        f"{name}: stopping at the next write boundary (the effect in flight finishes); "
        f"{again} to stop at once. Either way the run can be resumed.\n"
    )
    sys.stderr.flush()


def _drive(
    go: Callable[[asyncio.Event], Awaitable[RunResult]], resume_hint: str
) -> tuple[RunResult, int | None]:
    """Run ``go`` with Ctrl-C and SIGTERM turned into stop requests (see the module doc).

    Returns the result and the first signal received, if any. A stop at once (the
    second signal) ends the command here, with exit code 128 + the first signal's
    number and the command that resumes the run.
    """
    signals: list[SignalStop] = []

    async def guarded() -> RunResult:
        stop = asyncio.Event()
        with SignalStop(stop, on_first=_say_stopping) as handler:
            signals.append(handler)
            try:
                return await go(stop)
            except RunNotFound as exc:
                err_console.print(f"[red]error:[/red] {escape(printable(exc))}")
                raise typer.Exit(EXIT_UNUSABLE) from None

    try:
        result = run_async(guarded)
    except asyncio.CancelledError:
        received = signals[0].received if signals else None
        err_console.print(
            Text(
                f"stopped at once; if the run had started, resume it with: {printable(resume_hint)}"
            )
        )
        raise typer.Exit(exit_for_signal(received or signal.SIGINT)) from None
    return result, signals[0].received


def _report(result: RunResult, signum: int | None, as_json: bool, resume_hint: str) -> None:
    if as_json:
        data = result.comparable() | {"ended_at": result.ended_at}
        if result.stop_reason is StopReason.STOPPED:
            data["resume_command"] = resume_hint
        typer.echo(json_line(data))
    else:
        colour = "green" if result.stop_reason is StopReason.COMPLETED else "yellow"
        console.print(
            f"run [bold]{escape(printable(result.run_id))}[/bold]: "
            f"[{colour}]{result.stop_reason.value}[/{colour}] "
            f"after {result.steps} step(s), {result.actions} action(s), "
            f"{result.parse_failures} parse failure(s)"
        )
        if result.output is not None:
            console.print(Text(printable(result.output, lines=True)))
        if result.stop_reason is not StopReason.COMPLETED:
            console.print(Text(printable(result.detail, lines=True), style="dim"))
        if result.open_intent is not None:
            console.print(
                Text(
                    f"decide with: steadyloop runs resolve {printable(result.run_id)} "
                    f"{printable(result.open_intent)} "
                    "--happened JSON | --not-happened"
                ),
                soft_wrap=True,
            )
        if result.stop_reason is StopReason.STOPPED:
            console.print(Text(f"resume with: {printable(resume_hint)}"), soft_wrap=True)
    if result.stop_reason is StopReason.STOPPED:
        raise typer.Exit(exit_for_signal(signum or signal.SIGINT))
    if result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
        raise typer.Exit(EXIT_DECIDE)
    if result.stop_reason is not StopReason.COMPLETED:
        raise typer.Exit(EXIT_PROBLEM)


def run_command(  # noqa: PLR0917 - typer maps parameters to options
    agent: Annotated[str, typer.Argument(help=AGENT_HELP)],
    input: Annotated[str, typer.Argument(help="The user's message.")],
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[str, APP_OPT] = "default",
    user: Annotated[str, typer.Option("--user", "-u", help="The user the run acts for.")] = "user",
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="The session (default: a new one).")
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", "-r", help="The run id (default: a new one).")
    ] = None,
    as_json: Annotated[bool, JSON_OPT] = False,
) -> None:
    """Start a run of AGENT on INPUT; the same --run-id again continues it."""
    loaded = _agent(agent)
    rid = run_id or uuid.uuid4().hex
    sid = session or f"session-{rid}"
    hint = _resume_hint(rid, agent, journal, app)

    async def go(stop: asyncio.Event) -> RunResult:
        async with await open_journal(journal) as j:
            return await _mid_run(run(loaded, j, app, user, sid, rid, input, stop=stop), hint)

    _report(*_drive(go, hint), as_json, hint)


async def _mid_run(work: Awaitable[RunResult], resume_hint: str) -> RunResult:
    """Await a run, turning a journal that fails under it into exit 2 with a resume hint.

    A full disk, say: what was written stays, and the printed command resumes the run
    once that is fixed.
    """
    try:
        return await work
    except BackendUnavailable as exc:
        err_console.print(
            f"[red]error:[/red] {escape(printable(exc))}; once that is fixed, resume the "
            f"run with: {escape(printable(resume_hint))}"
        )
        raise typer.Exit(EXIT_UNUSABLE) from None


def resume_command(  # noqa: PLR0917 - typer maps parameters to options
    run_id: Annotated[str, typer.Argument(help="The run to continue.")],
    agent: Annotated[str, typer.Option("--agent", help=AGENT_HELP, metavar=AGENT_METAVAR)],
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[str, APP_OPT] = "default",
    takeover: Annotated[
        bool, typer.Option(help="Take over from a claimant on another host known to be gone.")
    ] = False,
    as_json: Annotated[bool, JSON_OPT] = False,
) -> None:
    """Continue a run from its journal; finished effects are not repeated."""
    loaded = _agent(agent)
    hint = _resume_hint(run_id, agent, journal, app)

    async def go(stop: asyncio.Event) -> RunResult:
        async with await open_journal(journal, create=False) as j:
            work = resume(loaded, j, app, run_id, stop=stop, takeover=takeover)
            return await _mid_run(work, hint)

    _report(*_drive(go, hint), as_json, hint)


@runs_app.command("list")
def list_command(
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[
        str | None, typer.Option("--app", "-a", help="Only this app (default: every app).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=0, help="At most this many runs (0: every run).")
    ] = 50,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only runs after this run id (the next page; with --app)."),
    ] = None,
    as_json: Annotated[bool, JSON_OPT] = False,
) -> None:
    """List the runs of a journal with their status, a page at a time (sorted by app and run id)."""
    if after is not None and app is None:
        raise typer.BadParameter("--after needs --app: run ids are sorted within an app")

    async def go() -> tuple[list[RunInfo], int]:
        async with await open_journal(journal, create=False) as j:
            keys = await run_keys(j, app)
            if after is not None and app is not None:
                keys = [k for k in keys if k > (app, after)]
            page = keys[: limit or None]
            return [await load_run(j, ns, run_id) for ns, run_id in page], len(keys) - len(page)

    runs, more = _call(go)
    hint = ""
    if more:
        last = runs[-1]
        nxt = shlex.join(["steadyloop", "runs", "list", "--app", last.app, "--after", last.run_id])
        hint = printable(f"{more} more run{'s' if more != 1 else ''}; next page: {nxt}")
    if as_json:
        for info in runs:
            typer.echo(json_line(_summary(info)))
        if hint:
            sys.stderr.write(hint + "\n")
        return
    if not runs:
        where = redact_url(journal or "") or "the default journal"
        console.print(Text(f"no runs in {printable(where)}"))
        return
    table = Table(title="runs", title_justify="left")
    for col in ("app", "run", "status", "steps", "actions", "user", "session", "started (UTC)"):
        table.add_column(col, overflow="fold")
    for info in runs:
        s = _summary(info)
        cells = (
            info.app,
            info.run_id,
            s["status"],
            s["steps"],
            s["actions"],
            s["user_id"],
            s["session_id"],
            _time(info.records[0].record.time),
        )
        table.add_row(*(Text(printable(c)) for c in cells))
    console.print(table)
    if hint:
        console.print(Text(hint))


def _summary(info: RunInfo) -> dict[str, Any]:
    state = info.state
    # An ended run's counters are the driver's, folded with the agent's parser.
    counts: Any = state.ended if state.ended is not None else state
    return {
        "app": info.app,
        "run_id": info.run_id,
        "status": info.status,
        "agent": state.started.get("agent"),
        "user_id": state.started.get("user_id"),
        "session_id": state.started.get("session_id"),
        "steps": counts.steps,
        "actions": counts.actions,
        "parse_failures": counts.parse_failures,
        "open_intent": None if state.open_intent is None else state.open_intent["intent_id"],
        "output": None if state.ended is None else state.ended.output,
        "detail": None if state.ended is None else state.ended.detail,
    }


@runs_app.command("show")
def show_command(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[str, APP_OPT] = "default",
    as_json: Annotated[bool, JSON_OPT] = False,
) -> None:
    """Show a run's status and every record of its stream."""

    async def go() -> RunInfo:
        async with await open_journal(journal, create=False) as j:
            return await load_run(j, app, run_id)

    info = _call(go)
    if as_json:
        data = _summary(info) | {"records": [r.record.to_dict() for r in info.records]}
        typer.echo(json_line(data))
        return
    s = _summary(info)
    console.print(
        Text.assemble(
            "run ",
            (printable(run_id), "bold"),
            printable(
                f" in app {app!r}: {s['status']} — agent {s['agent']!r}, "
                f"user {s['user_id']!r}, session {s['session_id']!r}, {s['steps']} step(s), "
                f"{s['actions']} action(s)"
            ),
        )
    )
    if s["open_intent"]:
        console.print(
            Text(f"open intent: {printable(s['open_intent'])} (may or may not have happened)")
        )
    title = f"{printable(app)} / {printable(info.records[0].stream)}"
    table = Table(title=Text(title), title_justify="left")
    for col in ("seq", "time (UTC)", "kind", "payload"):
        table.add_column(col, overflow="fold")
    for r in info.records:
        cells = (str(r.seq), _time(r.record.time), r.kind, _short(dict(r.payload), 100))
        table.add_row(*(Text(printable(c)) for c in cells))
    console.print(table)


@runs_app.command("resolve")
def resolve_command(  # noqa: PLR0917 - typer maps parameters to options
    run_id: Annotated[str, typer.Argument(help="The run.")],
    intent_id: Annotated[str, typer.Argument(help="The open intent.")],
    happened: Annotated[
        str | None,
        typer.Option("--happened", help="It happened; its outcome as JSON (the observation)."),
    ] = None,
    error: Annotated[
        str | None, typer.Option("--error", help="It happened and failed with this error.")
    ] = None,
    not_happened: Annotated[
        bool, typer.Option("--not-happened", help="It did not happen: resume does it again.")
    ] = False,
    note: Annotated[str, typer.Option(help="Why you decided so.")] = "",
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[str, APP_OPT] = "default",
    takeover: Annotated[
        bool, typer.Option(help="Take over from a claimant on another host known to be gone.")
    ] = False,
) -> None:
    """Record your decision about an intent that has no result, then resume the run."""
    chosen = sum([happened is not None or error is not None, not_happened])
    if chosen != 1 or (happened is not None and error is not None):
        err_console.print(
            "[red]error:[/red] give exactly one of --happened, --error or --not-happened"
        )
        raise typer.Exit(EXIT_UNUSABLE)
    outcome: Happened | NotHappened
    if not_happened:
        outcome = NotHappened(note)
    else:
        try:
            value = None if happened is None else json.loads(happened)
        except ValueError as exc:
            err_console.print(f"[red]error:[/red] --happened is not JSON: {escape(printable(exc))}")
            raise typer.Exit(EXIT_UNUSABLE) from None
        outcome = Happened(value, error=error, note=note)

    async def go() -> None:
        async with await open_journal(journal, create=False) as j:
            await resolve(j, app, run_id, intent_id, outcome, takeover=takeover)

    _call(go)
    console.print(
        Text(
            f"recorded; continue with: steadyloop resume {printable(run_id)}"
            f" --agent {AGENT_METAVAR} (the agent the run was started with, such as shop:agent)"
        )
    )


@runs_app.command("cancel")
def cancel_command(
    run_id: Annotated[str, typer.Argument(help="The run.")],
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    journal: Annotated[str | None, JOURNAL_OPT] = None,
    app: Annotated[str, APP_OPT] = "default",
) -> None:
    """Ask a run to stop; it ends ``cancelled`` at its next write (or when resumed)."""

    async def go() -> None:
        async with await open_journal(journal, create=False) as j:
            await request_cancel(j, app, run_id, reason)

    _call(go)
    console.print(Text(f"cancel requested for run {printable(run_id)}"))
