"""A tiny supervisor that makes a command and every descendant die with the worker.

Run by [`SubprocessExecutor`][steadyloop.audit.SubprocessExecutor] as
``python -I -S _supervisor.py PARENT_PID ARGV...`` (standard library only, no
``steadyloop`` import, so it starts in a few milliseconds). On Linux it:

* asks the kernel for ``SIGTERM`` when its parent (the worker) dies
  (``PR_SET_PDEATHSIG``), and checks the parent is still ``PARENT_PID`` afterwards,
  so a worker that died before the request was made is noticed too;
* becomes a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every descendant that
  loses its parent, including a ``setsid`` double-forked daemon, is re-parented to the
  supervisor instead of to init, so the whole tree stays below it;
* runs the command; when the command exits, or the supervisor gets ``SIGTERM``,
  ``SIGINT`` or ``SIGHUP`` (a timeout, a dead worker), it ``SIGKILL`` s every process
  of its tree until none is left, and exits with the command's status (a command
  killed by a signal makes the supervisor die of the same signal).

Elsewhere (no ``prctl``) it only runs the command, and kills it when told to.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: split after it.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _kill_tree(me: int) -> None:
    """SIGKILL the whole tree below ``me`` until nothing is left of it."""
    while True:
        pids = _descendants(me)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap()


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    me = os.getpid()
    linux = _prctl(_PR_SET_CHILD_SUBREAPER, 1) and _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    stop = {"signal": 0, "waiting": 1}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signal"] = signum
        if stop["waiting"]:
            raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if os.getppid() != parent:
        return 137  # the worker died before the death signal was armed
    try:
        child = os.fork()
    except OSError as exc:
        sys.stderr.write(f"cannot start the command: {exc}\n")
        return 126
    if child == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except FileNotFoundError:
            os.write(2, f"executable {command[0]!r} not found\n".encode())
            os._exit(127)
        except OSError as exc:
            os.write(2, f"cannot execute {command[0]!r}: {exc}\n".encode())
            os._exit(126)
    status = None
    try:
        while status is None:
            pid, code = os.waitpid(-1, 0)
            if pid == child:
                status = code
        stop["waiting"] = 0
    except (KeyboardInterrupt, ChildProcessError):
        stop["waiting"] = 0
    # Whatever the command left behind (daemons, a tree cut off by a signal) goes too.
    if linux:
        _kill_tree(me)
    elif status is None:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    if status is None:
        return 128 + (stop["signal"] or signal.SIGKILL)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(me, signum)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
