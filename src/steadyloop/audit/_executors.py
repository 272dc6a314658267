"""Executors: where commands run — in this process, or in a scrubbed subprocess.

[`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor] runs an argv in a scratch working
directory, with a timeout (the whole process group is killed when it runs out), a scrubbed
environment (only safe defaults and names allowed explicitly are inherited, so no secret leaks
in by accident) and capped output: beyond the cap the middle is cut and the text says how many
bytes were cut.

[`InProcessExecutor`][steadyloop.audit.InProcessExecutor] runs registered Python functions as
commands, for tools and checks that need no process of their own (tests, notebooks).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from steadyloop.loop import ReplayPolicy, Tool
from steadyloop.records import JSONValue

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "DEFAULT_MAX_OUTPUT",
    "CommandResult",
    "Executor",
    "InProcessExecutor",
    "SubprocessExecutor",
    "cap_text",
]

DEFAULT_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")
"""Variables a subprocess inherits unless told otherwise: none of them holds a secret."""

DEFAULT_MAX_OUTPUT = 64 * 1024
"""Bytes of stdout (and of stderr) kept per command."""

Status = Literal["exited", "timeout", "missing", "error"]


class _Capped:
    """Keeps the first and last ``limit // 2`` bytes of a stream, counting the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            keep = self.limit - self.limit // 2
            self.tail += data
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    def _kept(self) -> tuple[bytes, bytes]:
        """The head and tail kept, trimmed to whole characters where the middle was cut.

        A character split by the cut is dropped whole (its bytes count as cut), so the
        cut never shows up as replacement characters the output did not have.
        """
        head, tail = bytes(self.head), bytes(self.tail)
        if self.total - len(head) - len(tail) <= 0:
            return head, tail
        return head[: _complete_prefix(head)], tail[_char_start(tail) :]

    @property
    def cut(self) -> int:
        head, tail = self._kept()
        return self.total - len(head) - len(tail)

    def text(self) -> str:
        head, tail = self._kept()
        cut = self.total - len(head) - len(tail)
        if cut <= 0:
            # Nothing was cut: the halves are one stream, decoded together, so a
            # character across the split comes out whole.
            return (head + tail).decode("utf-8", errors="replace")
        return (
            head.decode("utf-8", errors="replace")
            + _cut_note(cut, self.total, len(head), len(tail))
            + tail.decode("utf-8", errors="replace")
        )


# The length of a UTF-8 character by the top five bits of its lead byte.
_UTF8_LENGTH = {**dict.fromkeys(range(0b11000, 0b11100), 2), 0b11100: 3, 0b11101: 3, 0b11110: 4}


def _complete_prefix(data: bytes) -> int:
    """How many bytes of ``data`` remain once an incomplete last UTF-8 character is dropped."""
    # A character is at most 4 bytes: look back at most 3 for the lead byte of the last.
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: an ASCII or a lead byte
            need = _UTF8_LENGTH.get(byte >> 3, 1)
            return len(data) - back if need > back else len(data)
    return len(data)


def _char_start(data: bytes) -> int:
    """Where the first whole UTF-8 character of ``data`` starts.

    At most 3 bytes are skipped: those continuing a character cut off before them.
    """
    n = 0
    while n < min(3, len(data)) and data[n] & 0xC0 == 0x80:
        n += 1
    return n


def _refusal(names: Sequence[str]) -> str:
    listed = ", ".join(names)
    flags = " ".join(f"--allow-env {name}" for name in names)
    return (
        f"the command asks to inherit {listed}, which this worker does not allow; whoever "
        f"runs the worker can allow it (steadyloop audit work {flags}, or "
        f"SubprocessExecutor(allow_env=...))"
    )


def _cut_note(cut: int, total: int, head: int, tail: int) -> str:
    return f"\n[… {cut} bytes cut: kept the first {head} and the last {tail} of {total} bytes …]\n"


CUT_NOTE = re.compile(
    r"\n\[… (\d+) bytes cut: kept the first (\d+) and the last (\d+) of (\d+) bytes …\]\n"
)
"""Finds a note `_cut_note` wrote (its groups: cut, head, tail, total)."""


def cap_text(text: str, limit: int) -> tuple[str, int]:
    """Cap ``text`` at about ``limit`` UTF-8 bytes, cutting the middle.

    Returns:
        The capped text (saying how much was cut, if anything was) and the bytes cut.
    """
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, 0
    buf = _Capped(limit)
    buf.feed(data)
    return buf.text(), buf.cut


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How a command went.

    Attributes:
        argv: The command.
        status: ``exited`` (see ``exit_code``), ``timeout`` (killed), ``missing`` (the
            executable was not found) or ``error`` (it could not be started).
        exit_code: The exit code, when it exited (negative: killed by that signal).
        stdout: Its standard output, capped.
        stderr: Its standard error, capped (or why it could not run).
        stdout_cut: Bytes cut from stdout.
        stderr_cut: Bytes cut from stderr.
        duration: Seconds it ran.
        cwd: Where it ran.
    """

    argv: tuple[str, ...]
    status: Status
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    stdout_cut: int = 0
    stderr_cut: int = 0
    duration: float = 0.0
    cwd: str = ""

    @property
    def ok(self) -> bool:
        """Whether it exited with status 0."""
        return self.status == "exited" and self.exit_code == 0

    @property
    def cut(self) -> int:
        """Bytes cut from both streams."""
        return self.stdout_cut + self.stderr_cut

    def summary(self) -> str:
        """One line: what happened."""
        name = self.argv[0] if self.argv else "?"
        if self.status == "exited":
            return f"`{name}` exited with status {self.exit_code} after {self.duration:.2f} s"
        if self.status == "timeout":
            return f"`{name}` was killed after its timeout ({self.duration:.2f} s)"
        if self.status == "missing":
            return f"`{name}` was not found: {self.stderr.strip()}"
        return f"`{name}` could not be started: {self.stderr.strip()}"

    def to_json(self) -> dict[str, JSONValue]:
        """Return the result as a JSON object."""
        return {
            "argv": list(self.argv),
            "status": self.status,
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdout_cut": self.stdout_cut,
            "stderr_cut": self.stderr_cut,
            "duration": round(self.duration, 6),
            "cwd": self.cwd,
        }


@runtime_checkable
class Executor(Protocol):
    """Runs a command and reports how it went; never raises for the command's failure."""

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, not the call's
        env: Mapping[str, str] | None = None,
        allow_env: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``argv`` in ``cwd`` within ``timeout`` seconds."""
        ...


class SubprocessExecutor:
    """Runs commands as subprocesses: scratch directory, timeout, scrubbed env, capped output.

    Args:
        timeout: Default seconds before the command's process group is killed.
        max_output: Bytes kept of stdout, and of stderr; the middle is cut beyond it.
        allow_env: Names of variables every command inherits, besides
            [`DEFAULT_ENV_ALLOW`][steadyloop.audit.DEFAULT_ENV_ALLOW]. This list belongs to
            whoever runs the worker: a command (a task's verify spec, say) may name only
            variables already in it.
        scratch_root: Where scratch directories are made for commands run without a
            ``cwd`` (the system temp dir by default); each is removed afterwards.
        source_env: The environment inherited from (``os.environ`` by default).
    """

    def __init__(
        self,
        *,
        timeout: float = 60.0,
        max_output: int = DEFAULT_MAX_OUTPUT,
        allow_env: Sequence[str] = (),
        scratch_root: str | os.PathLike[str] | None = None,
        source_env: Mapping[str, str] | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        if max_output < 0:
            raise ValueError(f"max_output must be >= 0, got {max_output!r}")
        self.timeout = timeout
        self.max_output = max_output
        self.allow_env = tuple(allow_env)
        self._allowed = frozenset({*DEFAULT_ENV_ALLOW, *self.allow_env})
        self.scratch_root = None if scratch_root is None else str(scratch_root)
        self._source_env = source_env

    def environment(
        self, env: Mapping[str, str] | None = None, allow_env: Sequence[str] = ()
    ) -> dict[str, str]:
        """The environment a command gets: allowed names inherited, then ``env`` set.

        Raises:
            ValueError: ``allow_env`` asks for a name this executor does not allow.
        """
        refused = self.refused(allow_env)
        if refused:
            raise ValueError(_refusal(refused))
        source = os.environ if self._source_env is None else self._source_env
        out = {k: v for k, v in source.items() if k in self._allowed}
        out.update(env or {})
        return out

    def refused(self, allow_env: Sequence[str]) -> list[str]:
        """The names of ``allow_env`` that this executor does not let commands inherit."""
        return sorted({name for name in allow_env if name not in self._allowed})

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, not the call's
        env: Mapping[str, str] | None = None,
        allow_env: Sequence[str] = (),
    ) -> CommandResult:
        """Run ``argv``; a missing executable, a timeout or a crash is a result, not an error.

        Args:
            argv: The command.
            cwd: Where it runs; a fresh scratch directory (removed afterwards) if ``None``.
            timeout: Seconds (the executor's default if ``None``).
            env: Variables to set.
            allow_env: Names it asks to inherit. Each must be one the executor allows;
                otherwise the command does not run and the result (status ``error``) says
                which names were refused — a task cannot widen the worker's allow-list.
        """
        argv = tuple(argv)
        if not argv:
            raise ValueError("an empty command")
        refused = self.refused(allow_env)
        if refused:
            where = "" if cwd is None else str(cwd)
            return CommandResult(argv, "error", None, stderr=_refusal(refused), cwd=where)
        limit = self.timeout if timeout is None else timeout
        if cwd is None:
            with tempfile.TemporaryDirectory(prefix="steadyloop-", dir=self.scratch_root) as tmp:
                return await self._run(argv, tmp, limit, self.environment(env, allow_env))
        return await self._run(argv, str(cwd), limit, self.environment(env, allow_env))

    async def _run(
        self,
        argv: tuple[str, ...],
        cwd: str,
        timeout: float,  # noqa: ASYNC109 - the command's limit, not the call's
        env: dict[str, str],
    ) -> CommandResult:
        env.setdefault("HOME", cwd)
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except FileNotFoundError:
            if not os.path.isdir(cwd):  # noqa: ASYNC240 - one stat, on a failure path
                return CommandResult(
                    argv, "error", None, stderr=f"working directory {cwd} does not exist", cwd=cwd
                )
            text = f"executable {argv[0]!r} not found (PATH={env.get('PATH', '')})"
            return CommandResult(argv, "missing", None, stderr=text, cwd=cwd)
        except (OSError, ValueError) as exc:
            # ValueError: the OS cannot take the command as given (a NUL byte in an
            # argument, a variable name holding "="); a result too, never a raise.
            return CommandResult(
                argv, "error", None, stderr=f"{type(exc).__name__}: {exc}", cwd=cwd
            )
        out, err = _Capped(self.max_output), _Capped(self.max_output)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [
            asyncio.ensure_future(_pump(proc.stdout, out)),
            asyncio.ensure_future(_pump(proc.stderr, err)),
        ]
        status: Status = "exited"
        try:
            # Not proc.wait(): on Python 3.11 it returns only once every pipe is closed,
            # so a background child holding stdout would turn an exit into a timeout.
            await asyncio.wait_for(_exited(proc), timeout)
        except TimeoutError:
            status = "timeout"
            _kill_group(proc.pid)
            await _exited(proc)
        except BaseException:
            _kill_group(proc.pid)
            for r in readers:
                r.cancel()
            raise
        finally:
            # The main process is gone: nothing it left behind in its group outlives it.
            _kill_group(proc.pid)
        # Readers end at EOF; a grandchild that escaped the group may keep a pipe open.
        _done, pending = await asyncio.wait(readers, timeout=1.0)
        for r in pending:
            r.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.5 if not pending else 0.01)
        return CommandResult(
            argv,
            status,
            proc.returncode if status == "exited" else None,
            stdout=out.text(),
            stderr=err.text(),
            stdout_cut=max(0, out.cut),
            stderr_cut=max(0, err.cut),
            duration=time.monotonic() - started,
            cwd=cwd,
        )

    def tool(
        self,
        cwd: str | os.PathLike[str],
        *,
        name: str = "run_command",
        policy: ReplayPolicy = ReplayPolicy.NEVER,
        timeout: float | None = None,
    ) -> Tool:
        """A loop tool that runs a command in ``cwd`` with this executor.

        Its policy is ``NEVER`` by default: a command may change the world, so resume
        never runs it twice on a guess.
        """

        async def run_command(argv: list[str]) -> JSONValue:
            result = await self.run(argv, cwd=cwd, timeout=timeout)
            return result.to_json()

        return Tool(
            name=name,
            function=run_command,
            policy=policy,
            description="Run a command (an argv list) in the task's working directory.",
            parameters={
                "type": "object",
                "properties": {"argv": {"type": "array", "items": {"type": "string"}}},
                "required": ["argv"],
            },
        )


async def _pump(stream: asyncio.StreamReader, into: _Capped) -> None:
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        into.feed(chunk)


async def _exited(proc: asyncio.subprocess.Process) -> int:
    """Wait until the process itself has exited, whatever holds its pipes open."""
    delay = 0.001
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)
    return proc.returncode


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


CommandFunction = Callable[..., Any]
"""A function run as a command: ``fn(cwd: Path, *args)``; see
[`InProcessExecutor`][steadyloop.audit.InProcessExecutor]."""


class InProcessExecutor:
    """Runs registered Python functions as commands, in this process.

    ``argv[0]`` names the function; it is called as ``fn(cwd, *argv[1:])`` (sync or
    async). It returns an exit code (``int``; ``True``/``None`` mean 0, ``False``
    means 1) or ``(exit code, output)``. An exception
    is exit code 1 with the traceback as stderr. A timeout is reported as such, but a
    synchronous function cannot be stopped: it finishes in its thread.

    Args:
        functions: Commands by name.
        timeout: Default seconds.
        max_output: Bytes kept of the output.
    """

    def __init__(
        self,
        functions: Mapping[str, CommandFunction],
        *,
        timeout: float = 60.0,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> None:
        self.functions = dict(functions)
        self.timeout = timeout
        self.max_output = max_output

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the command's limit, not the call's
        env: Mapping[str, str] | None = None,
        allow_env: Sequence[str] = (),
    ) -> CommandResult:
        """Run the function ``argv[0]`` names; see the class docstring."""
        argv = tuple(argv)
        where = str(cwd or "")
        fn = self.functions.get(argv[0]) if argv else None
        if fn is None:
            known = ", ".join(sorted(self.functions)) or "none"
            return CommandResult(
                argv,
                "missing",
                None,
                stderr=f"no in-process command {argv[0] if argv else ''!r} (known: {known})",
                cwd=where,
            )
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()

        def call() -> Any:
            return fn(Path(where or "."), *argv[1:])

        stderr = ""
        try:
            if inspect.iscoroutinefunction(fn):
                value = await asyncio.wait_for(fn(Path(where or "."), *argv[1:]), limit)
            else:
                value = await asyncio.wait_for(asyncio.to_thread(call), limit)
        except TimeoutError:
            return CommandResult(
                argv, "timeout", None, duration=time.monotonic() - started, cwd=where
            )
        except Exception:
            value = 1
            stderr = traceback.format_exc()
        output = ""
        if isinstance(value, tuple):
            value, extra = value
            output = str(extra)
        code = 0 if value is None or value is True else 1 if value is False else int(value)
        out, out_cut = cap_text(output, self.max_output)
        err, err_cut = cap_text(stderr, self.max_output)
        return CommandResult(
            argv,
            "exited",
            code,
            stdout=out,
            stderr=err,
            stdout_cut=out_cut,
            stderr_cut=err_cut,
            duration=time.monotonic() - started,
            cwd=where,
        )
