"""A true network blackhole for tests: a network namespace on a veth pair whose link can go dark.

A proxy cannot blackhole a route (the kernel still acknowledges every byte it is sent),
so TCP keepalives and ``tcp_user_timeout`` never fire through one.
[`Blackhole`][steadyloop.faults.Blackhole] puts a process in a network namespace of its
own, joined to this one by a veth pair on a private ``/30``; ``blackhole()`` takes the
host end of the link down and routes the namespace's address into a blackhole, so
packets either way are dropped with no reset and no error: the client's own TCP timers
are all that can notice. ``restore()`` brings the link back. It needs root (``ip netns``)
and touches nothing but its own namespace and link.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from types import TracebackType

__all__ = ["Blackhole"]

_SERIAL = itertools.count()
"""Tells apart the holes of one process (their links' names are short: 15 bytes at most)."""


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        raise OSError(f"ip {' '.join(args)} failed: {proc.stderr.strip() or proc.returncode}")


class Blackhole:
    """A network namespace on a veth pair, whose route to this namespace can be blackholed.

    Use ``with Blackhole() as hole``; run the cut-off process with
    ``hole.command([...])``; it reaches servers listening on ``hole.host_ip``.

    Args:
        name: The namespace's name (from this process's pid by default).
        subnet: The third octet of the private ``10.201.X.0/30`` the pair lives on.

    Attributes:
        host_ip: This namespace's end of the pair.
        inner_ip: The namespace's end.
        dark: Whether the route is blackholed.
    """

    def __init__(self, name: str | None = None, subnet: int = 0) -> None:
        if not 0 <= subnet <= 255:
            raise ValueError(f"Blackhole(subnet={subnet}): the third octet is 0 to 255")
        tag = f"{os.getpid() % 100000}x{next(_SERIAL) % 1000}"
        self.name = name or f"sl-hole-{tag}"
        self.host_ip = f"10.201.{subnet}.1"
        self.inner_ip = f"10.201.{subnet}.2"
        self.dark = False
        self._host_link = f"slh{tag}"
        self._inner_link = f"sln{tag}"

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def blackhole(self) -> None:
        """Drop every packet between the namespace and this one, silently."""
        _ip("link", "set", self._host_link, "down")
        _ip("route", "replace", "blackhole", f"{self.inner_ip}/32")
        self.dark = True

    def restore(self) -> None:
        """Bring the link back; connections that have not timed out carry on."""
        _ip("route", "del", "blackhole", f"{self.inner_ip}/32")
        _ip("link", "set", self._host_link, "up")
        _ip("route", "replace", f"{self.inner_ip}/32", "dev", self._host_link)
        self.dark = False

    def __enter__(self) -> Blackhole:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self._host_link, "type", "veth", "peer", "name", self._inner_link)
            _ip("link", "set", self._inner_link, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self._host_link)
            _ip("link", "set", self._host_link, "up")
            inner = ["netns", "exec", self.name, "ip"]
            _ip(*inner, "addr", "add", f"{self.inner_ip}/30", "dev", self._inner_link)
            _ip(*inner, "link", "set", self._inner_link, "up")
            _ip(*inner, "link", "set", "lo", "up")
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        for args in (
            ("route", "del", "blackhole", f"{self.inner_ip}/32"),
            ("link", "del", self._host_link),
            ("netns", "del", self.name),
        ):
            with contextlib.suppress(OSError):  # already gone
                _ip(*args)
