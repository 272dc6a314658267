"""A seccomp filter that leaves a sandbox no socket to reach a server on the machine.

Used by [`BubblewrapExecutor`][steadyloop.audit.BubblewrapExecutor] with
``network=False``, as ``bwrap --seccomp FD``. A new network namespace
(``--unshare-net``) takes every interface away but the sandbox's own loopback, and
with it every abstract Unix socket; it does not take away *pathname* Unix sockets:
``/var/run/postgresql/.s.PGSQL.5432`` is a file, and the read-only root keeps it
connectable. The kernel's seccomp filters cannot read the address a ``connect`` is
given, so the rule is on ``socket`` itself:

* ``socket`` succeeds only for ``AF_INET`` and ``AF_INET6``, which the network
  namespace confines to the sandbox's own loopback (no server of the machine listens
  there). Any other family (``AF_UNIX`` above all, but also ``AF_NETLINK``,
  ``AF_PACKET``, ``AF_VSOCK``, …) fails with ``EPERM``. ``socketpair`` still works: its
  two ends are connected to each other and to nothing else;
* ``io_uring_setup`` fails with ``EPERM``: an io_uring can open and connect sockets
  without the ``socket`` and ``connect`` system calls a filter sees;
* the other ABIs of the machine are held to the same rule: on x86-64, x32 calls fail,
  and i386 calls go through the same checks (``socketcall``, which hides its
  arguments, fails); a program of an ABI the filter does not know is killed.

The filter is classic BPF, built here with the standard library only; it is written to
bubblewrap through a pipe, and inherited by every process of the sandbox.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

__all__ = ["no_socket_filter", "seccomp_supported"]

# Classic BPF (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06

# linux/seccomp.h
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_DENY = _RET_ERRNO | errno.EPERM

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARG0 = 0, 4, 16

_AF_INET, _AF_INET6 = 2, 10
_X32_BIT = 0x40000000


@dataclass(frozen=True)
class _Abi:
    """One system-call ABI: its audit arch, and the numbers the filter looks at."""

    arch: int
    socket: int
    denied: tuple[int, ...]  # always EPERM: io_uring_setup, socketcall
    x32: bool = False  # numbers with the x32 bit set are another ABI: refused


_X86_64 = _Abi(0xC000003E, socket=41, denied=(425,), x32=True)
_I386 = _Abi(0x40000003, socket=359, denied=(102, 425))
_AARCH64 = _Abi(0xC00000B7, socket=198, denied=(425,))
_ARM = _Abi(0x40000028, socket=281, denied=(425,))

_ABIS = {"x86_64": (_X86_64, _I386), "amd64": (_X86_64, _I386), "aarch64": (_AARCH64, _ARM)}


def seccomp_supported(machine: str | None = None) -> bool:
    """Whether a filter can be built for this machine (x86-64 and 64-bit ARM)."""
    return (machine or platform.machine()).lower() in _ABIS


def no_socket_filter(machine: str | None = None) -> bytes:
    """The filter's program, as bwrap's ``--seccomp`` reads it (``struct sock_filter`` s).

    Args:
        machine: ``platform.machine()`` of the machine it runs on (this one by default).

    Raises:
        ValueError: No filter is known for the machine.
    """
    name = (machine or platform.machine()).lower()
    if name not in _ABIS:
        raise ValueError(f"no seccomp filter for the {name!r} architecture")
    program = _Program()
    for abi in _ABIS[name]:
        skip = f"not-{abi.arch:x}"
        program.load(_ARCH)
        program.jump_unless(abi.arch, skip)
        program.load(_NR)
        if abi.x32:
            program.jump_if_at_least(_X32_BIT, "deny")
        program.jump_if(abi.socket, "socket")
        for nr in abi.denied:
            program.jump_if(nr, "deny")
        program.ret(_RET_ALLOW)
        program.label(skip)
    program.ret(_RET_KILL_PROCESS)  # an ABI the filter does not know
    program.label("socket")
    program.load(_ARG0)  # the family: an int, the low half of args[0]
    program.jump_if(_AF_INET, "allow")
    program.jump_if(_AF_INET6, "allow")
    program.label("deny")
    program.ret(_DENY)
    program.label("allow")
    program.ret(_RET_ALLOW)
    return program.assemble()


class _Program:
    """A classic BPF program with forward jumps to labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int, str | None, str | None]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, offset, None, None))

    def jump_if(self, value: int, target: str) -> None:
        self.code.append((_JEQ_K, value, target, None))

    def jump_unless(self, value: int, target: str) -> None:
        self.code.append((_JEQ_K, value, None, target))

    def jump_if_at_least(self, value: int, target: str) -> None:
        self.code.append((_JGE_K, value, target, None))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, value, None, None))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for at, (op, k, yes, no) in enumerate(self.code):
            out += struct.pack("=HBBI", op, self._offset(at, yes), self._offset(at, no), k)
        return bytes(out)

    def _offset(self, at: int, target: str | None) -> int:
        if target is None:
            return 0  # fall through to the next instruction
        offset = self.labels[target] - at - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"a jump to {target!r} does not fit a BPF jump")
        return offset
