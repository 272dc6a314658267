"""``steadyloop audit``: submit tasks, run workers, see where tasks are and what happened."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import math
import os
import pkgutil
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from steadyloop._errors import ExecutorUnavailable, IllegalTransition, TaskNotFound, TaskSpecError
from steadyloop.audit import (
    DEFAULT_APP,
    DEFAULT_GRACE,
    DEFAULT_ROUND_TIME,
    AgentFactory,
    AuditReport,
    BubblewrapExecutor,
    Executor,
    GoalSpec,
    SubprocessExecutor,
    TaskBoard,
    TaskSpec,
    TaskStatus,
    UnreadableTask,
    Verifier,
    VerifySpec,
    Worker,
    WorkerEvent,
)
from steadyloop.cli._common import (
    EXIT_PROBLEM,
    EXIT_UNUSABLE,
    console,
    err_console,
    json_line,
    printable,
    run_async,
)
from steadyloop.journal import DEFAULT_URL, redact_url
from steadyloop.loop import Agent, load_agent

__all__ = ["audit_app"]

audit_app = typer.Typer(
    help="The audit loop: submit tasks, run workers, show status and trails.",
    no_args_is_help=True,
)

STORE = typer.Option(
    "--store",
    "-s",
    envvar="STEADYLOOP_AUDIT_STORE",
    help="Where the queue and the trails live: sqlite:FILE or postgresql://…",
)
APP = typer.Option(
    "--app",
    help="The app: the journal namespace of trails and runs, and the only tasks of the "
    "queue this command sees, claims or changes.",
)


def _time(us: int) -> str:
    stamp = dt.datetime.fromtimestamp(us / 1_000_000, tz=dt.UTC)
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


def _fail(message: str, code: int = EXIT_UNUSABLE) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {escape(printable(message))}")
    return typer.Exit(code)


def _positive_seconds(value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise typer.BadParameter(f"must be a positive number of seconds, got {value}")
    return value


# Options that build a spec from the command line; a spec file holds them itself.
_SPEC_OPTIONS = {
    "task_id": "--id",
    "priority": "--priority",
    "depends_on": "--depends-on",
    "key": "--key",
    "goal": "--goal",
    "verify": "--verify",
    "rounds": "--rounds",
    "audit_rounds": "--audit-rounds",
    "workdir": "--workdir",
}


def _load_specs(path: str) -> list[TaskSpec]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        # A whole-file JSON document first: an array of specs, or one (pretty-printed) spec.
        whole = json.loads(text)
    except ValueError:
        items = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError as exc:
                raise TaskSpecError(
                    f"{path}: line {line_no} is not JSON (neither is the whole file): {exc}"
                ) from None
    else:
        items = whole if isinstance(whole, list) else [whole]
    if not items:
        raise TaskSpecError(f"{path} holds no task spec (an empty file, or an empty list)")
    specs = []
    for n, item in enumerate(items, 1):
        try:
            specs.append(TaskSpec.from_json(item))
        except TaskSpecError as exc:
            raise TaskSpecError(f"{path}: task {n}: {exc}", field=exc.field) from None
    return specs


@audit_app.command("submit")
def submit(  # noqa: PLR0917 - typer reads the parameters
    ctx: typer.Context,
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="What to do.")] = None,
    file: Annotated[
        str | None,
        typer.Option(
            "--file", "-f", help="Task specs as JSON, a JSON list, or JSONL ('-': stdin)."
        ),
    ] = None,
    task_id: Annotated[str | None, typer.Option("--id", help="The task id.")] = None,
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    depends_on: Annotated[
        list[str] | None,
        typer.Option("--depends-on", "-d", help="A task that must complete first."),
    ] = None,
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    goal: Annotated[str | None, typer.Option(help="Goal mode: what must be true.")] = None,
    verify: Annotated[
        str | None, typer.Option(help="Goal mode: the command that checks the goal.")
    ] = None,
    rounds: Annotated[int, typer.Option(help="Goal mode: the round budget.")] = 3,
    audit_rounds: Annotated[int, typer.Option(help="Audit rounds before a person.")] = 3,
    workdir: Annotated[str | None, typer.Option(help="The folder the task works in.")] = None,
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Queue a task (or the tasks of a file) and print each task's id."""
    try:
        if file is not None:
            if prompt is not None:
                raise _fail("give --prompt or --file, not both")
            # Given on the command line (not left at its default): the source's name
            # is read, as typer carries its own copy of click's ParameterSource.
            given = [
                flag
                for name, flag in _SPEC_OPTIONS.items()
                if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
            ]
            if given:
                raise _fail(
                    f"{', '.join(given)} cannot be combined with --file: the spec file gives "
                    "each task's fields (task_id, priority, depends_on, idempotency_key, goal, "
                    "max_audit_rounds, workdir)"
                )
            specs = _load_specs(file)
        else:
            goal_spec = None
            if goal is None and verify is None:
                extra = [
                    flag
                    for name, flag in (("rounds", "--rounds"),)
                    if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
                ]
                if extra:
                    raise TaskSpecError(
                        f"{extra[0]} is goal mode's round budget: give --goal and --verify "
                        "too, or leave it out",
                        field="goal.round_budget",
                    )
            if goal is not None or verify is not None:
                if goal is None or verify is None:
                    raise TaskSpecError("goal mode needs both --goal and --verify", field="goal")
                goal_spec = GoalSpec(goal, VerifySpec(verify), round_budget=rounds)  # type: ignore[arg-type]
            specs = [
                TaskSpec(
                    prompt=prompt or "",
                    task_id=task_id,
                    priority=priority,
                    depends_on=tuple(depends_on or ()),
                    idempotency_key=key,
                    goal=goal_spec,
                    max_audit_rounds=audit_rounds,
                    workdir=workdir,
                )
            ]
    except TaskSpecError as exc:
        raise _fail(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise _fail(f"cannot read the task specs: {exc}") from None
    run_async(_submit, store, app, specs)


async def _submit(store: str, app: str, specs: list[TaskSpec]) -> None:
    async with await TaskBoard.open(store, app=app) as board:
        try:
            results = await board.submit_many(specs)
        except TaskSpecError as exc:
            raise _fail(str(exc)) from None
    for r in results:
        state = "duplicate (already queued)" if r.duplicate else "queued"
        console.print(Text(f"{printable(r.task_id)}  {state}"))


@audit_app.command("work")
def work(  # noqa: PLR0917 - typer reads the parameters
    agent: Annotated[str, typer.Option("--agent", "-a", help="The agent, as module:attribute.")],
    workers: Annotated[int, typer.Option("--workers", "-n", min=1, help="Workers to run.")] = 1,
    lease: Annotated[
        float,
        typer.Option(help="Seconds a claim lasts without a heartbeat.", callback=_positive_seconds),
    ] = 30.0,
    scratch: Annotated[
        str | None, typer.Option(help="Where scratch folders for tasks are made.")
    ] = None,
    allow_env: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-env",
            help="A variable verify commands inherit; a task can only name allowed ones.",
        ),
    ] = None,
    forever: Annotated[
        bool,
        typer.Option("--forever", help="Keep waiting for tasks instead of stopping when idle."),
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            help="Seconds the current round may go on after SIGTERM or Ctrl-C before it is "
            "interrupted and its task handed back.",
            min=0,
        ),
    ] = DEFAULT_GRACE,
    round_time: Annotated[
        float,
        typer.Option(
            "--round-time",
            help="Seconds a round's run may take; an overrun is stopped and audited.",
            callback=_positive_seconds,
        ),
    ] = DEFAULT_ROUND_TIME,
    isolate: Annotated[
        bool,
        typer.Option(
            "--isolate",
            help="Run verify commands in a bubblewrap sandbox (needs the bubblewrap package).",
        ),
    ] = False,
    network: Annotated[
        bool,
        typer.Option(
            "--network/--no-network", help="With --isolate: whether verify commands get a network."
        ),
    ] = True,
    hide: Annotated[
        list[str] | None,
        typer.Option("--hide", help="With --isolate: a path the sandbox sees as an empty folder."),
    ] = None,
    poll: Annotated[
        float | None,
        typer.Option(
            help="Seconds between looks at the queue of an idle worker on SQLite or MySQL "
            "(PostgreSQL wakes workers at once through LISTEN/NOTIFY).",
            callback=lambda v: None if v is None else _positive_seconds(v),
        ),
    ] = None,
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Run N workers on the queue, showing progress, until no task is left (or forever).

    SIGTERM or the first Ctrl-C stops claiming and gives the current round ``--grace``
    seconds; a round still going then is interrupted and its task handed back at once.
    A second signal ends the process at once.
    """
    if (not network or hide) and not isolate:
        raise _fail("--no-network and --hide need --isolate (the plain executor isolates nothing)")
    try:
        loaded = _load_agent(agent)
    except Exception as exc:
        raise _fail(str(exc)) from None
    try:
        executor = (
            BubblewrapExecutor(allow_env=allow_env or [], network=network, hide=hide or [])
            if isolate
            else SubprocessExecutor(allow_env=allow_env or [])
        )
    except ExecutorUnavailable as exc:
        raise _fail(str(exc)) from None
    settings = _WorkSettings(workers, lease, scratch, forever, grace, round_time, poll)
    run_async(_work, store, app, loaded, executor, settings)


def _load_agent(path: str) -> Agent | AgentFactory:
    """The agent ``module:attribute`` names, or the factory it names.

    A function taking one argument is an agent factory, called for every drive of a
    round with its [`TaskContext`][steadyloop.audit.TaskContext]; anything else is loaded
    as [`load_agent`][steadyloop.loop.load_agent] does (an agent, or a function of no
    arguments returning one).
    """
    try:
        obj = pkgutil.resolve_name(path)
    except (ImportError, AttributeError, ValueError):
        obj = None  # load_agent says what is wrong
    if callable(obj) and not isinstance(obj, Agent):
        try:
            params = inspect.signature(obj).parameters.values()
        except (TypeError, ValueError):
            params = None
        required = [
            p
            for p in params or ()
            if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(required) == 1:
            return cast("AgentFactory", obj)
    return load_agent(path)


@dataclass(frozen=True)
class _WorkSettings:
    workers: int
    lease: float
    scratch: str | None
    forever: bool
    grace: float
    round_time: float
    poll: float | None


async def _work(
    store: str, app: str, agent: Agent | AgentFactory, executor: Executor, settings: _WorkSettings
) -> None:
    n, lease, scratch, forever = (
        settings.workers,
        settings.lease,
        settings.scratch,
        settings.forever,
    )
    async with await TaskBoard.open(store, app=app, create=False, poll=settings.poll) as board:
        counts = await board.counts()
        total = sum(counts.values())
        done = sum(v for k, v in counts.items() if k.terminal)
        progress = Progress(
            TextColumn("[bold]tasks"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        )
        bar = progress.add_task("", total=total, completed=done)
        final = {"completed", "needs-human", "goal-unmet", "blocked", "cancelled"}

        def on_event(event: WorkerEvent) -> None:
            if event.kind in final:
                progress.advance(bar)
            if event.kind in final | {
                "pushed_back",
                "resumed",
                "lease-lost",
                "error",
                "released",
                "interrupted",
                "time-limit",
                "store-unavailable",
            }:
                progress.console.print(
                    f"[dim]{escape(printable(event.worker))}[/dim] "
                    f"{escape(printable(event.task_id))}: "
                    f"[bold]{event.kind}[/bold] {escape(printable(event.detail))}"
                )
            progress.update(bar, description=escape(f"{printable(event.task_id)} {event.kind}"))

        verifier = Verifier(executor)
        crew = [
            Worker(
                board,
                agent,
                worker_id=f"{socket.gethostname()}:{os.getpid()}:w{i}",
                verifier=verifier,
                scratch_root=scratch,
                lease=lease,
                on_event=on_event,
                grace=settings.grace,
                round_time=settings.round_time,
            )
            for i in range(n)
        ]
        signals: list[int] = []

        def on_signal(signum: int) -> None:
            signals.append(signum)
            name = signal.Signals(signum).name
            if len(signals) > 1:
                err_console.print(
                    f"{name} again: stopping at once; a task still held is taken over by "
                    f"another worker when its lease ({lease:g} s) expires"
                )
                os._exit(128 + signum)
            err_console.print(
                f"{name}: claiming no more tasks; the current round has {settings.grace:g} s "
                "to finish before it is interrupted and handed back (send it again to stop "
                "at once)"
            )
            for w in crew:
                w.shutdown()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            with progress:
                await asyncio.gather(*(w.run(until_idle=not forever) for w in crew))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        counts = await board.counts()
    summary = ", ".join(f"{v} {k.value}" for k, v in counts.items() if v)
    console.print(f"done: {summary or 'no tasks'}")
    errors = [e for w in crew for e in w.errors]
    if errors:
        raise _fail(f"{len(errors)} round(s) failed with errors; see above", EXIT_PROBLEM)


@audit_app.command("status")
def status(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per task.")] = False,
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Show every task: status, priority, rounds, audits, claims, owner and why.

    A row this version cannot read (a status or spec field from a newer Steadyloop,
    during a rolling upgrade) is listed in its place as ``unreadable`` with the reason,
    and a line on stderr counts such rows; the others are shown as usual and the exit
    code is 0, as for any listing. With ``--json`` such a row is an object with
    ``task_id``, ``status`` (as stored) and ``unreadable`` (the reason) only.
    """
    run_async(_status, store, app, as_json)


async def _status(store: str, app: str, as_json: bool) -> None:
    async with await TaskBoard.open(store, app=app, create=False) as board:
        tasks = await board.listing()
    unreadable = sum(isinstance(t, UnreadableTask) for t in tasks)
    if unreadable:
        err_console.print(
            Text(
                f"warning: {unreadable} task(s) cannot be read by this steadyloop (written "
                "by a newer version?); listed as unreadable"
            )
        )
    if as_json:
        for t in tasks:
            if isinstance(t, UnreadableTask):
                bad = {"task_id": t.task_id, "status": t.status, "unreadable": t.reason}
                console.out(json_line(bad), highlight=False)
                continue
            line = {
                "task_id": t.task_id,
                "status": t.status.value,
                "priority": t.priority,
                "round": t.round,
                "audit_rounds": t.audit_rounds,
                "attempts": t.attempts,
                "owner": t.owner,
                "detail": t.detail,
            }
            console.out(json_line(line), highlight=False)
        return
    table = Table(title=Text(f"tasks in {printable(redact_url(store))}"), title_justify="left")
    for col in ("task", "status", "prio", "round", "audits", "claims", "owner", "detail"):
        table.add_column(col, overflow="fold")
    colours = {
        TaskStatus.COMPLETED: "green",
        TaskStatus.NEEDS_HUMAN: "red",
        TaskStatus.GOAL_UNMET: "red",
        TaskStatus.BLOCKED: "yellow",
        TaskStatus.CANCELLED: "yellow",
        TaskStatus.RUNNING: "cyan",
        TaskStatus.QUEUED: "white",
    }
    for t in tasks:
        if isinstance(t, UnreadableTask):
            table.add_row(
                Text(printable(t.task_id)),
                Text("unreadable", style="red"),
                *([""] * 5),
                Text(printable(t.reason)),
            )
            continue
        table.add_row(
            Text(printable(t.task_id)),
            f"[{colours[t.status]}]{t.status.value}[/]",
            str(t.priority),
            str(t.round),
            str(t.audit_rounds),
            str(t.attempts),
            Text(printable(t.owner or "")),
            Text(printable(t.detail)),
        )
    console.print(table if tasks else "no tasks")


def _summary(kind: str, payload: dict[str, Any]) -> str:
    short = kind.removeprefix("task.")
    if short == "submitted":
        spec = payload.get("spec") or {}
        return str(spec.get("prompt", ""))[:80]
    if short in ("claimed", "lease_lost"):
        return f"worker {payload.get('worker')}"
    if short in ("round_started", "round_resumed"):
        return f"round {payload.get('round')}, run {payload.get('run_id')}"
    if short == "run_finished":
        return f"{payload.get('stop_reason')}: {str(payload.get('output') or '')[:60]}"
    if short == "verified":
        return f"{'passed' if payload.get('passed') else 'FAILED'}: {payload.get('summary')}"
    if short == "audited":
        findings = payload.get("findings") or []
        ids = ", ".join(str(f.get("id")) for f in findings)
        return f"audit {payload.get('audit_round')}: {len(findings)} finding(s) {ids}".strip()
    return str(payload.get("reason") or payload.get("detail") or "")


@audit_app.command("show")
def show(
    task: Annotated[str, typer.Argument(help="The task id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per record.")] = False,
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Show a task's trail: every transition, in order."""
    run_async(_show, store, app, task, as_json)


async def _show(store: str, app: str, task: str, as_json: bool) -> None:
    async with await TaskBoard.open(store, app=app, create=False) as board:
        try:
            row = await board.get(task)
        except TaskNotFound as exc:
            raise _fail(str(exc), EXIT_PROBLEM) from None
        trail = await board.trail(task)
    if as_json:
        for r in trail:
            line = {"seq": r.seq, **r.record.to_dict()}
            console.out(json_line(line), highlight=False)
        return
    table = Table(
        title=Text(
            f"task {printable(task)}: {row.status.value} after {row.round} round(s), "
            f"{row.audit_rounds} audit(s)"
        ),
        title_justify="left",
    )
    for col in ("seq", "time (UTC)", "event", "round", "what"):
        table.add_column(col, overflow="fold")
    for r in trail:
        payload = dict(r.payload)
        table.add_row(
            str(r.seq),
            _time(r.record.time),
            Text(printable(r.kind.removeprefix("task."))),
            Text(printable(payload.get("round", ""))),
            Text(printable(_summary(r.kind, payload))),
        )
    console.print(table)
    # The last audit's findings: the packet sent back, or those the task ended with.
    last_audit = next((r for r in reversed(trail) if r.kind == "task.audited"), None)
    if last_audit is not None:
        report = AuditReport.from_json(last_audit.payload)
        sent = any(r.kind == "task.pushed_back" and r.seq > last_audit.seq for r in trail)
        what = "sent back as a packet" if sent else "the task ended with"
        console.print(
            f"[bold]findings of audit {report.audit_round}[/bold] (round {report.round}, "
            f"{what}): {len(report.findings) or 'none'}"
        )
        for f in report.findings:
            evidence = printable(f.evidence, lines=True).replace("\n", "\n      ")
            console.print(
                Text(
                    f"  [{f.severity.value}] {printable(f.id)} ({f.kind.value}, gate "
                    f"{f.gate.value}): {printable(f.title)}\n    evidence:\n      {evidence}\n"
                    f"    reproduction: {printable(f.reproduction)}\n"
                    f"    acceptance: {printable(f.acceptance)}"
                )
            )


# -- a person's decisions: cancel and retry -------------------------------------------


@audit_app.command("cancel")
def cancel(
    task: Annotated[str, typer.Argument(help="The task id.")],
    reason: Annotated[
        str, typer.Option("--reason", help="Why (recorded in the trail).")
    ] = "cancelled by a person",
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Cancel a task: a queued one now (its dependents are blocked), a running one by its worker."""
    run_async(_cancel, store, app, task, reason)


async def _cancel(store: str, app: str, task: str, reason: str) -> None:
    async with await TaskBoard.open(store, app=app, create=False) as board:
        try:
            status = await board.cancel(task, reason)
        except TaskNotFound as exc:
            raise _fail(str(exc)) from None
        except IllegalTransition as exc:
            raise _fail(str(exc)) from None
        blocked = [t.task_id for t in await board.tasks(TaskStatus.BLOCKED)]
    if status is TaskStatus.CANCELLED:
        console.print(Text(f"{printable(task)}  cancelled"))
        dependents = [printable(t) for t in blocked if t != task]
        if dependents:
            console.print(Text(f"blocked: {', '.join(dependents)}"))
    else:
        console.print(
            Text(
                f"{printable(task)}  cancel requested: its worker stops at the next write boundary"
            )
        )


@audit_app.command("retry")
def retry(
    task: Annotated[str, typer.Argument(help="The task id.")],
    note: Annotated[
        str, typer.Option("--note", help="What to do differently; the agent reads it.")
    ],
    store: Annotated[str, STORE] = DEFAULT_URL,
    app: Annotated[str, APP] = DEFAULT_APP,
) -> None:
    """Queue a needs-human or goal-unmet task again, keeping its trail and counters.

    Any other task is refused with exit code 2, a blocked one too: retry the dependency
    it waits on instead, and its blocked dependents are queued again with it.
    """
    run_async(_retry, store, app, task, note)


async def _retry(store: str, app: str, task: str, note: str) -> None:
    async with await TaskBoard.open(store, app=app, create=False) as board:
        try:
            state = await board.retry(task, note, blocked=False)
        except (TaskNotFound, IllegalTransition, TaskSpecError) as exc:
            raise _fail(str(exc)) from None
        reopened = [
            t
            for t in await board.queue.dependents(task)
            if (await board.state(t)).retry_note == f"dependency {task!r} was retried"
            and (await board.get(t)).status is TaskStatus.QUEUED
        ]
    console.print(
        Text(
            f"{printable(task)}  queued again (retry {state.retries}; {state.round} round(s) and "
            f"{state.audit_rounds} audit(s) so far)"
        )
    )
    if reopened:
        names = ", ".join(printable(t) for t in reopened)
        console.print(Text(f"queued again with it (they were blocked): {names}"))
