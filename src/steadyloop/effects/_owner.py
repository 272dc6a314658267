"""Who holds an effect or a run: a process on a host, told alive or dead without writes."""

from __future__ import annotations

import os
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from steadyloop.records import JSONValue

__all__ = ["LIVE_TOKENS", "Liveness", "Owner"]

LIVE_TOKENS: set[str] = set()
"""Tokens of the drivers and guarded effects running in this process right now."""

Liveness = Literal["alive", "dead", "unknown"]
"""What can be said of an owner from here: ``unknown`` when it ran on another host."""


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None (not Linux)."""
    stat = _read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    return stat.rsplit(")", 1)[-1].split()


def _pid_start(pid: int) -> int | None:
    """The start time of a process (Linux clock ticks since boot), to tell reused pids."""
    fields = _stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Owner:
    """Who drives a run: a process on a host, and a token unique to one driver.

    Attributes:
        host: The host name.
        boot: The kernel boot id (Linux), so a pid from before a reboot is not mistaken
            for a live one.
        pid: The process id.
        pid_start: The process's start time, so a reused pid is not mistaken either.
        token: Unique to one ``run``/``resume`` call.
    """

    host: str
    boot: str | None
    pid: int
    pid_start: int | None
    token: str

    @classmethod
    def me(cls, token: str) -> Owner:
        """This process, with a driver token.

        The process's identity is read once per process (a forked child reads its own),
        not from ``/proc`` again for every intent that names its owner.
        """
        pid = os.getpid()
        known = _ME.get(pid)
        if known is None:
            _ME.clear()
            known = _ME[pid] = cls(
                host=socket.gethostname(),
                boot=_read_text("/proc/sys/kernel/random/boot_id"),
                pid=pid,
                pid_start=_pid_start(pid),
                token="",
            )
        return cls(known.host, known.boot, pid, known.pid_start, token)

    def to_json(self) -> dict[str, JSONValue]:
        """Return the owner as a JSON object."""
        return {
            "host": self.host,
            "boot": self.boot,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "token": self.token,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Owner:
        """Rebuild an owner from [`to_json`][steadyloop.effects.Owner.to_json] output."""
        return cls(
            host=str(data.get("host")),
            boot=data.get("boot"),
            pid=int(data.get("pid") or 0),
            pid_start=data.get("pid_start"),
            token=str(data.get("token")),
        )

    def same_host(self) -> bool:
        """Whether the owner ran on this host, in this boot."""
        me = Owner.me("")
        return self.host == me.host and self.boot == me.boot

    def process_alive(self) -> bool:
        """Whether the owner's process still runs (meaningful on this host only).

        A killed process its parent has not reaped yet (a zombie) is dead: it will
        never write again.
        """
        if self.pid == os.getpid():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        fields = _stat_fields(self.pid)
        if fields is None:
            return True  # no /proc: the signal test is all we have
        if fields[:1] in (["Z"], ["X"]):
            return False
        try:
            start: int | None = int(fields[19])
        except (IndexError, ValueError):
            start = None
        return start is None or self.pid_start is None or start == self.pid_start

    def liveness(self, live: Collection[str] = LIVE_TOKENS) -> Liveness:
        """Whether the owner can still write, as far as this process can tell.

        Reads only the process table: an owner never renews anything.

        Args:
            live: The tokens of the owners running in this process now.

        Returns:
            ``alive`` for a token in ``live`` or a live process on this host in this
            boot; ``dead`` for a process that is gone (or reused), an earlier boot, or
            this process under a token no longer live; ``unknown`` on another host.
        """
        if self.token in live:
            return "alive"
        me = Owner.me("")
        if self.host != me.host:
            return "unknown"
        if None not in (self.boot, me.boot) and self.boot != me.boot:
            return "dead"
        if self.pid == os.getpid():
            return "dead"  # this process, but that owner is gone (it crashed or was dropped)
        return "alive" if self.process_alive() else "dead"


_ME: dict[int, Owner] = {}
"""This process's identity, by pid (see [Owner.me][steadyloop.effects.Owner.me])."""
