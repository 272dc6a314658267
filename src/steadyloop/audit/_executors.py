"""Executors: where commands run — in this process, in a subprocess, or in a sandbox.

[`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor] runs an argv in a scratch
working directory, with a timeout, a scrubbed environment (the safe defaults, plus only
the names a command asks for *and* the worker allows) and capped output: beyond the cap
the middle is cut and the text says how many bytes were cut. A small supervisor
(``_supervisor.py``) holds the command's whole process tree: it dies with the worker,
even a SIGKILLed one, and takes every descendant (a ``setsid`` daemon too) with it.
It does *not* isolate: the command runs as the worker's user, sees the whole
filesystem, the network and the other processes (``/proc/<pid>/environ`` of the
worker's user included).

[`BubblewrapExecutor`][steadyloop.audit.BubblewrapExecutor] runs the same commands in a
bubblewrap sandbox: its own PID namespace (no other process is visible, and the
sandbox dies with the worker), a read-only root, only the working directory writable,
a private ``/tmp``, no inherited descriptors, optionally no network (no interface but
its own loopback, and no Unix socket either: no server on the machine can be reached),
and bubblewrap
itself started with exactly the command's environment and no secret on its command
line.

[`InProcessExecutor`][steadyloop.audit.InProcessExecutor] runs registered Python
functions as commands, for tools and checks that need no process of their own (tests,
notebooks).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from steadyloop._errors import ExecutorUnavailable
from steadyloop.audit._seccomp import no_socket_filter, seccomp_supported
from steadyloop.loop import ReplayPolicy, Tool
from steadyloop.records import JSONValue

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "DEFAULT_MAX_OUTPUT",
    "BubblewrapExecutor",
    "CommandResult",
    "Executor",
    "InProcessExecutor",
    "SubprocessExecutor",
    "cap_text",
]

_log = logging.getLogger(__name__)

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

    def split(self) -> tuple[str, str] | None:
        """The kept start and end, decoded, when the middle was cut; ``None`` otherwise."""
        head, tail = self._kept()
        if self.total - len(head) - len(tail) <= 0:
            return None
        return head.decode("utf-8", errors="replace"), tail.decode("utf-8", errors="replace")

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


def cap_text(text: str, limit: int) -> tuple[str, int]:
    """Cap ``text`` at about ``limit`` UTF-8 bytes, cutting the middle.

    Returns:
        The capped text (saying how much was cut, if anything was) and the bytes cut.
    """
    capped, cut, _split = _cap(text, limit)
    return capped, cut


def _cap(text: str, limit: int) -> tuple[str, int, tuple[str, str] | None]:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, 0, None
    buf = _Capped(limit)
    buf.feed(data)
    return buf.text(), buf.cut, buf.split()


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
        stdout_split: When the middle of stdout was cut: the kept start and end (the
            text without the note ``stdout`` carries); ``None`` when nothing was cut.
        stderr_split: The same for stderr.
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
    stdout_split: tuple[str, str] | None = None
    stderr_split: tuple[str, str] | None = None

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


_SUPERVISOR = str(Path(__file__).with_name("_supervisor.py"))


class SubprocessExecutor:
    """Runs commands as subprocesses: scratch directory, timeout, scrubbed env, capped output.

    Each command runs under a small supervisor (on Linux): when the command exits, times
    out, or the worker dies — even by SIGKILL — the command and every process it
    started, a double-forked ``setsid`` daemon included, are killed.

    What it does not isolate: the command runs as the worker's user, with the worker's
    filesystem (it can read any file the worker can, the task store included), network,
    and view of other processes: ``/proc/<pid>/environ`` and ``/proc/<pid>/fd`` of every
    process of the same user, the worker's own among them, are readable. Its
    environment is scrubbed, not its reach; use
    [`BubblewrapExecutor`][steadyloop.audit.BubblewrapExecutor] when a task must not read
    the worker's secrets.

    Args:
        timeout: Default seconds before the command's process tree is killed.
        max_output: Bytes kept of stdout, and of stderr; the middle is cut beyond it.
        allow_env: Names of variables a command may inherit when it asks for them
            (its ``allow_env``), besides [`DEFAULT_ENV_ALLOW`][steadyloop.audit.DEFAULT_ENV_ALLOW],
            which every command gets. This list belongs to whoever runs the worker: a
            command that asks for a name not in it does not run; one that does not ask
            gets none of them.
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
        """The environment a command gets: the defaults and the names it asked for, then ``env``.

        Raises:
            ValueError: ``allow_env`` asks for a name this executor does not allow.
        """
        refused = self.refused(allow_env)
        if refused:
            raise ValueError(_refusal(refused))
        source = os.environ if self._source_env is None else self._source_env
        wanted = {*DEFAULT_ENV_ALLOW, *allow_env}
        out = {k: v for k, v in source.items() if k in wanted}
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

    def _launch(
        self, argv: tuple[str, ...], cwd: str, env: dict[str, str], fds: list[int]
    ) -> list[str]:
        """The argv actually started: the command under the supervisor.

        Descriptors added to ``fds`` are inherited by what is started, and closed here
        once it is.
        """
        return [sys.executable, "-I", "-S", _SUPERVISOR, str(os.getpid()), *argv]

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """End a command still running: the supervisor kills its tree, then the group goes."""
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            _log.debug("command %d: already gone when it was to be stopped", proc.pid)
        try:
            async with asyncio.timeout(2.0):
                await _exited(proc)
        except TimeoutError:
            _log.info("command %d: still running 2 s after SIGTERM; its group is killed", proc.pid)
        _kill_group(proc.pid)

    async def _run(
        self,
        argv: tuple[str, ...],
        cwd: str,
        timeout: float,  # noqa: ASYNC109 - the command's limit, not the call's
        env: dict[str, str],
    ) -> CommandResult:
        env.setdefault("HOME", cwd)
        if not os.path.isdir(cwd):  # noqa: ASYNC240 - one stat before the start
            return CommandResult(
                argv, "error", None, stderr=f"working directory {cwd} does not exist", cwd=cwd
            )
        if _executable(argv[0], cwd, env) is None:
            text = f"executable {argv[0]!r} not found (PATH={env.get('PATH', '')})"
            return CommandResult(argv, "missing", None, stderr=text, cwd=cwd)
        started = time.monotonic()
        fds: list[int] = []
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._launch(argv, cwd, env, fds),
                cwd=cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=fds,
            )
        except (OSError, ValueError) as exc:
            # ValueError: the OS cannot take the command as given (a NUL byte in an
            # argument, a variable name holding "="); a result too, never a raise.
            return CommandResult(
                argv, "error", None, stderr=f"{type(exc).__name__}: {exc}", cwd=cwd
            )
        finally:
            for fd in fds:
                os.close(fd)  # the child has its copy
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
            await self._stop(proc)
            await _exited(proc)
        except BaseException:
            # Cancelled (the worker stops, a round ran out of time): nothing outlives it.
            await asyncio.shield(self._stop(proc))
            for r in readers:
                r.cancel()
            raise
        finally:
            # The main process is gone: nothing it left behind in its group outlives it.
            _kill_group(proc.pid)
        # Readers end at EOF, once every process holding the pipes is gone.
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
            stdout_split=out.split(),
            stderr_split=err.split(),
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


BUBBLEWRAP_PACKAGE = "bubblewrap"
"""The Debian (and Ubuntu, Fedora, Arch) package that provides ``bwrap``."""


class BubblewrapExecutor(SubprocessExecutor):
    """Runs commands in a bubblewrap sandbox: what a task runs cannot read the worker's secrets.

    Each command runs under ``bwrap`` with:

    * its own PID namespace (``--unshare-pid``): ``/proc`` shows only the sandbox's
      processes, so no other process's environment, command line or open files can be
      read; and ``--die-with-parent``: the whole sandbox, daemons included, dies with the
      worker, even a SIGKILLed one;
    * a read-only root (``--ro-bind / /``), a private ``/tmp``, a fresh ``/dev`` and
      ``/proc``, and only the working directory writable. The private ``/tmp`` is
      empty: a tool or virtual environment the worker keeps under ``/tmp`` (or under a
      ``hide`` path) is not there, and a command needing it is reported ``missing``,
      naming the path;
    * bubblewrap itself started with exactly the command's environment (process 1 of the
      sandbox is bubblewrap, and its ``/proc/1/environ`` is readable inside), and nothing
      secret on its command line (``/proc/1/cmdline`` is readable too);
    * no inherited descriptors but stdin (``/dev/null``), stdout and stderr;
    * its own IPC and UTS namespaces, and a new session (no terminal to inject into);
    * with ``network=False``, no way to any server on the machine or beyond, by TCP
      or by Unix socket: a network namespace of its own (``--unshare-net``: no
      interface but its own loopback, where nothing of the machine listens, and no
      abstract Unix socket of the machine), and a seccomp filter (``--seccomp``) under
      which ``socket`` makes only Internet sockets (so a pathname Unix socket such as
      ``/var/run/postgresql/.s.PGSQL.5432``, which the read-only root still shows,
      cannot be connected to) and io_uring cannot be set up. ``socketpair`` still
      works; a command that needs a Unix socket of its own needs the network on.

    What it does not isolate: the filesystem stays *readable* (anything the worker's
    user can read, except the paths given in ``hide``, each covered by an empty tmpfs);
    it runs as the worker's user; with the network on, it can reach what the worker
    reaches, Unix sockets included. It is Linux only (and ``network=False`` needs
    x86-64 or 64-bit ARM).

    Args:
        network: Whether commands may use the network (and Unix sockets).
        hide: Paths covered by an empty tmpfs in the sandbox (a home, the task store's
            folder, a secrets directory).
        bwrap: The ``bwrap`` executable (found on ``PATH`` by default).
        timeout: Default seconds before the sandbox is killed.
        max_output: Bytes kept of stdout, and of stderr.
        allow_env: As for [`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor].
        scratch_root: As for [`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor].
        source_env: As for [`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor].

    Raises:
        ExecutorUnavailable: ``bwrap`` is not installed, or cannot make namespaces here
            (the message names the package); or, with ``network=False``, the seccomp
            filter cannot be built or applied here. Nothing falls back to running
            unisolated, nor with the network on.
    """

    def __init__(
        self,
        *,
        network: bool = True,
        hide: Sequence[str | os.PathLike[str]] = (),
        bwrap: str | None = None,
        timeout: float = 60.0,
        max_output: int = DEFAULT_MAX_OUTPUT,
        allow_env: Sequence[str] = (),
        scratch_root: str | os.PathLike[str] | None = None,
        source_env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            timeout=timeout,
            max_output=max_output,
            allow_env=allow_env,
            scratch_root=scratch_root,
            source_env=source_env,
        )
        self.network = network
        self.hide = tuple(os.path.abspath(p) for p in hide)
        found = bwrap or shutil.which("bwrap")
        if found is None:
            raise ExecutorUnavailable(
                f"the isolating executor needs bubblewrap (bwrap), which is not installed: "
                f"install the package {BUBBLEWRAP_PACKAGE!r} (apt-get install "
                f"{BUBBLEWRAP_PACKAGE}); nothing runs unisolated instead"
            )
        self.bwrap = found
        self._filter = b""
        if not network:
            if not seccomp_supported():
                raise ExecutorUnavailable(
                    f"the isolating executor cannot shut Unix sockets off on this "
                    f"{platform.machine()!r} machine (its seccomp filter knows x86-64 and "
                    "64-bit ARM): without it, network=False would leave local servers "
                    "reachable; nothing runs unisolated instead"
                )
            self._filter = no_socket_filter()
        fds: list[int] = []
        probe_args = [found, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent"]
        probe_args += self._sealed(fds)
        sealed = not network
        try:
            probe = subprocess.run(
                [*probe_args, "true"],
                env={"PATH": os.defpath},
                capture_output=True,
                text=True,
                check=False,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[0]
            raise ExecutorUnavailable(
                f"bubblewrap ({found}) cannot make a sandbox here: {why} (it needs user or "
                "PID namespaces: run as root, or allow unprivileged user namespaces, e.g. "
                "sysctl kernel.unprivileged_userns_clone=1"
                + ("; and, without network, network namespaces and seccomp filters" * sealed)
                + "); nothing runs unisolated instead"
            )

    def _sealed(self, fds: list[int]) -> list[str]:
        """The options that take the network away; the filter's pipe goes into ``fds``."""
        if self.network:
            return []
        read, write = os.pipe()
        fds.append(read)
        try:
            os.write(write, self._filter)  # a few hundred bytes: the pipe holds them
        finally:
            os.close(write)
        return ["--unshare-net", "--seccomp", str(read)]

    def _launch(
        self, argv: tuple[str, ...], cwd: str, env: dict[str, str], fds: list[int]
    ) -> list[str]:
        cwd = os.path.abspath(cwd)
        args = [
            self.bwrap,
            "--ro-bind", "/", "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--tmpfs", "/tmp",
        ]  # fmt: skip
        for path in self.hide:
            args += ["--tmpfs", path]
        args += [
            "--bind", cwd, cwd,
            "--chdir", cwd,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--new-session",
        ]  # fmt: skip
        args += self._sealed(fds)
        return [*args, "--", *argv]

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        # bwrap's process 1 has --die-with-parent: killing bwrap ends the namespace.
        _kill_group(proc.pid)

    async def _run(
        self,
        argv: tuple[str, ...],
        cwd: str,
        timeout: float,  # noqa: ASYNC109 - the command's limit, not the call's
        env: dict[str, str],
    ) -> CommandResult:
        result = await super()._run(argv, cwd, timeout, env)
        # The executable was found outside, but the sandbox does not show it (under
        # /tmp, which is the sandbox's own, or a hidden path; or its #! interpreter is
        # there): bwrap's exec fails, and bwrap exits 1 with this one line. A command
        # printing exactly that line itself and exiting 1 is reported as missing too,
        # which fails its verification all the same.
        prefix = f"bwrap: execvp {argv[0]}: "
        lines = result.stderr.splitlines()
        if not (
            result.status == "exited"
            and result.exit_code == 1
            and not result.stdout
            and len(lines) == 1
            and lines[0].startswith(prefix)
        ):
            return result
        why = lines[0].removeprefix(prefix)
        if why != os.strerror(errno.ENOENT):
            text = f"executable {argv[0]!r} cannot be started inside the sandbox: {why}"
            return replace(result, status="error", exit_code=None, stderr=text)
        text = (
            f"executable {argv[0]!r} not found inside the sandbox: "
            f"{self._hidden(_executable(argv[0], cwd, env), cwd)}"
        )
        return replace(result, status="missing", exit_code=None, stderr=text)

    def _hidden(self, path: str | None, cwd: str) -> str:
        """Why a path the worker sees is not there inside the sandbox, as far as known."""
        if path is not None:
            real = os.path.realpath(path)
            for top in (*self.hide, "/tmp"):
                if _under(real, top) and not _under(real, os.path.realpath(cwd)):
                    if top == "/tmp":
                        return (
                            f"{real} is under /tmp, which is the sandbox's own (empty) "
                            "folder; a virtual environment or tool there is not visible "
                            "inside: put it elsewhere (under the working directory, or "
                            "outside /tmp)"
                        )
                    return f"{real} is under {top}, which the sandbox hides"
        return (
            "the worker finds it, so its #! interpreter (or a library) is probably under "
            "/tmp or a hidden path, which the sandbox does not show"
        )


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def _executable(name: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """Where ``name`` is, as the command's ``exec`` would find it, or ``None``.

    A name the OS cannot take at all (a NUL in it) is returned as it is: starting it
    fails with the OS's own reason.
    """
    if "\0" in name:
        return name
    if os.sep in name:
        path = os.path.join(cwd, name)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(name, path=env.get("PATH", os.defpath))


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
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the usual case: the group is already empty
    except PermissionError as exc:
        _log.info("process group %d cannot be killed from here: %s", pid, exc)


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
        except Exception as exc:  # the function's own failure is its command's stderr
            value = 1
            stderr = "".join(traceback.format_exception(exc))
        output = ""
        if isinstance(value, tuple):
            value, extra = value
            output = str(extra)
        code = 0 if value is None or value is True else 1 if value is False else int(value)
        out, out_cut, out_split = _cap(output, self.max_output)
        err, err_cut, err_split = _cap(stderr, self.max_output)
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
            stdout_split=out_split,
            stderr_split=err_split,
        )
