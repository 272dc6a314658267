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
* runs the command in a **PID namespace** of its own where the kernel allows one
  (``unshare(CLONE_NEWPID)``: root, or ``CAP_SYS_ADMIN``): the supervisor's child is
  that namespace's init, and the command is init's child. No process inside can
  signal the supervisor (it is not in the namespace) nor kill init (the kernel ignores
  signals to a namespace's init from inside it), and when init ends, the kernel kills
  every process left in the namespace. So a command that kills its parent
  (``kill -9 $PPID``) kills nothing, and a ``setsid`` daemon it left dies with it.
  Without the namespace, a command that kills the supervisor takes the subreaper with
  it, and what it left in another session runs on;
* when the command exits, or the supervisor gets ``SIGTERM``, ``SIGINT`` or ``SIGHUP``
  (a timeout, a dead worker), it ``SIGKILL`` s every process of its tree until none is
  left, and exits with the command's status (a command killed by a signal makes the
  supervisor die of the same signal).

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
_CLONE_NEWPID = 0x20000000


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _unshare_pid() -> bool:
    """Put the next child into a new PID namespace (as its init); False if not allowed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.unshare(_CLONE_NEWPID)) == 0
    except (OSError, AttributeError):
        return False


def _exec(command: list[str]) -> None:
    """Become the command (in a forked child); exit 127 or 126 when it cannot start."""
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


def _init(command: list[str], report: int) -> None:
    """Be init of the command's PID namespace: run it, reap orphans, report its status.

    Writes the command's wait status to ``report`` and exits: the kernel then kills
    every process still in the namespace. Dies with the supervisor.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        pid = os.fork()
    except OSError as exc:
        os.write(2, f"cannot start the command: {exc}\n".encode())
        os._exit(126)
    if pid == 0:
        os.close(report)
        _exec(command)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if done == pid:
            os.write(report, str(status).encode())
            os._exit(0)


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
    boxed = linux and _unshare_pid()
    read_end, write_end = os.pipe() if boxed else (-1, -1)
    try:
        child = os.fork()
    except OSError as exc:
        sys.stderr.write(f"cannot start the command: {exc}\n")
        return 126
    if child == 0:
        if boxed:
            os.close(read_end)
            _init(command, write_end)
        _exec(command)
    if boxed:
        os.close(write_end)
    status = None
    try:
        while status is None:
            pid, code = os.waitpid(-1, 0)
            if pid == child:
                status = code
        stop["waiting"] = 0
    except (KeyboardInterrupt, ChildProcessError):
        stop["waiting"] = 0
    if boxed and status is not None:
        # init has ended. Its own status says nothing of the command's; its report
        # does (none if init was killed).
        told = os.read(read_end, 64)
        if told:
            status = int(told)
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
