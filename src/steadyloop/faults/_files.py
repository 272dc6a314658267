"""A fault-injecting file layer: cut a write at any byte, fail it, or lose power.

[`FaultyFiles`][steadyloop.faults.FaultyFiles] wraps the real file layer of the JSONL backend.
It keeps, for every file it touches, the bytes that were last made durable (by ``fsync``) and
whether the file's directory entry was made durable (by syncing the directory). From that it
can:

* **cut** the stream of written bytes at any offset: the write that crosses the offset
  writes only its head, then the "process" dies
  ([`SimulatedCrash`][steadyloop.faults.SimulatedCrash]), and every later operation dies too;
* **crash before an operation**: the N-th mutating operation (write, sync, truncate,
  directory sync) dies before it does anything;
* **fire any [`Fault`][steadyloop.faults.Fault]** at its operations: each is a write
  boundary of the layer's [`FaultPlan`][steadyloop.faults.FaultPlan], labelled
  ``files.write``, ``files.sync``, ``files.truncate``, ``files.sync_directory`` or
  ``files.remove`` (so ``Fault(at=2, label="files.write", how="enospc")`` makes the second
  write fail with ``ENOSPC``, writing nothing);
* **fail an fsync** as Linux does after a disk error: the call raises ``EIO`` and the
  bytes it should have flushed are dropped from the disk's view while the page cache
  still shows them, so a later successful ``fsync`` does not make them durable (the
  file holds zeros there after power loss) unless they were written again;
* **lose power**: every file goes back to its last synced bytes (optionally keeping a
  random head of what was written after, as a disk that flushed part of its cache
  would), and files whose directory entry was never synced disappear.

Examples:
    >>> layer = FaultyFiles()
    >>> layer.cut_after(100)  # the 101st byte written never reaches the file
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from collections.abc import Callable

from steadyloop.faults._plan import Fault, FaultPlan
from steadyloop.journal import Files

__all__ = ["FaultyFiles"]

LABEL = "files"
"""The label of the layer's write boundaries: ``files.write``, ``files.sync``, …"""


class FaultyFiles(Files):
    """A [`Files`][steadyloop.journal.Files] that can crash, fail and lose power on command.

    Args:
        plan: The process the layer belongs to: share one with a
            [`FaultyJournal`][steadyloop.faults.FaultyJournal] or a framework kit and
            they die together. A plan of its own by default.

    Attributes:
        plan: The process's [`FaultPlan`][steadyloop.faults.FaultPlan].
        bytes_written: Bytes written through this layer so far.
        syncs: ``fsync`` calls (files and directories) performed so far.
    """

    def __init__(self, plan: FaultPlan | None = None) -> None:
        self.plan = plan if plan is not None else FaultPlan()
        self.bytes_written = 0
        self.syncs = 0
        self._cut_at: int | None = None
        self._paths: dict[int, str] = {}
        self._synced: dict[str, bytes] = {}
        self._entry_durable: dict[str, bool] = {}
        self._dropped: dict[str, list[tuple[int, int]]] = {}

    @property
    def operations(self) -> int:
        """Mutating operations performed (or attempted) through this layer so far."""
        return sum(1 for label in self.plan.boundaries if label.startswith(LABEL + "."))

    @property
    def crashed(self) -> bool:
        """Whether the simulated process has died."""
        return self.plan.dead

    # -- arming -----------------------------------------------------------------------

    def arm(self, fault: Fault) -> None:
        """Arm a [`Fault`][steadyloop.faults.Fault] on the layer's plan."""
        self.plan.arm(fault)

    def cut_after(self, nbytes: int) -> None:
        """Die when the total bytes written would pass ``nbytes``; write only up to it."""
        self._cut_at = nbytes

    def crash_before(self, operation: int) -> None:
        """Die just before the ``operation``-th mutating operation (counting from 1).

        Armed after that operation, it dies before the next one.
        """
        self.plan.arm(Fault(at=max(1, operation), label=LABEL))

    def fail_syncs(self, count: int = 1) -> None:
        """Make the next ``count`` file syncs fail with ``EIO``, dropping what they held."""
        for _ in range(count):
            self.plan.arm(Fault(at=1, how="eio", label=f"{LABEL}.sync"))

    def _op(self, name: str, operation: Callable[[], None]) -> None:
        self.plan.write(f"{LABEL}.{name}", operation)

    # -- the file operations -------------------------------------------------------

    def read(self, path: str) -> bytes | None:
        """Read a file (the dead read nothing)."""
        self.plan.check()
        return super().read(path)

    def open_append(self, path: str) -> tuple[int, bool]:
        """Open for appending, remembering what was durable before."""
        self.plan.check()
        fd, created = super().open_append(path)
        self._paths[fd] = path
        if path not in self._synced:
            self._synced[path] = b"" if created else (super().read(path) or b"")
            self._entry_durable[path] = not created
        return fd, created

    def write(self, fd: int, data: bytes) -> None:
        """Write, or write a head of ``data`` and die if the cut point falls inside it."""
        self._op("write", lambda: self._write(fd, data))

    def _write(self, fd: int, data: bytes) -> None:
        if self._cut_at is not None and self.bytes_written + len(data) > self._cut_at:
            head = data[: max(0, self._cut_at - self.bytes_written)]
            if head:
                super().write(fd, head)
            self.bytes_written += len(head)
            self.plan.die(f"write cut after byte {self._cut_at}")
        super().write(fd, data)
        self.bytes_written += len(data)

    def sync(self, fd: int) -> None:
        """Sync, and remember the file's bytes as durable (but for dropped ones).

        Raises:
            OSError: ``EIO``, when armed by
                [`fail_syncs`][steadyloop.faults.FaultyFiles.fail_syncs] (or a ``Fault``
                with ``how="eio"`` before a ``files.sync``): the bytes it should have
                flushed are dropped from the disk's view.
        """
        path = self._paths[fd]
        done: list[bool] = []

        def sync() -> None:
            self._sync(fd, path)
            done.append(True)

        try:
            self._op("sync", sync)
        except OSError as exc:
            if exc.errno == errno.EIO and not done:
                current = super().read(path) or b""
                durable = len(self._synced.get(path, b""))
                if len(current) > durable:
                    self._dropped.setdefault(path, []).append((durable, len(current)))
                raise OSError(
                    errno.EIO, f"Input/output error (a simulated fsync failure: {exc})", path
                ) from None
            raise

    def _sync(self, fd: int, path: str) -> None:
        current = super().read(path) or b""
        super().sync(fd)
        self.syncs += 1
        for start, stop in self._dropped.get(path, ()):
            end = min(stop, len(current))
            if start < end:  # marked clean after the failure: never reached the disk
                current = current[:start] + bytes(end - start) + current[end:]
        self._synced[path] = current

    def truncate(self, fd: int, size: int) -> None:
        """Truncate (not durable until the next sync)."""
        self._op("truncate", lambda: self._truncate(fd, size))

    def _truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        path = self._paths.get(fd)
        if path in self._dropped:
            kept = [(a, min(b, size)) for a, b in self._dropped[path] if a < size]
            self._dropped[path] = kept

    def sync_directory(self, path: str) -> None:
        """Sync a directory: files created in it so far become durable entries."""
        self._op("sync_directory", lambda: self._sync_directory(path))

    def _sync_directory(self, path: str) -> None:
        super().sync_directory(path)
        self.syncs += 1
        for file_path in self._entry_durable:
            if os.path.dirname(file_path) == os.path.normpath(path):
                self._entry_durable[file_path] = True

    def remove(self, path: str) -> None:
        """Remove a file (treated as durable at once, as the journal syncs after it)."""
        self._op("remove", lambda: self._remove(path))

    def _remove(self, path: str) -> None:
        super().remove(path)
        self._synced.pop(path, None)
        self._entry_durable.pop(path, None)

    def close(self, fd: int) -> None:
        """Close a descriptor (allowed after a crash: the kernel closes them too)."""
        self._paths.pop(fd, None)
        super().close(fd)

    # -- power loss -----------------------------------------------------------------

    def power_loss(self, rng: random.Random | None = None) -> None:
        """Put every touched file back to what was durable, as after a power cut.

        Args:
            rng: If given, each file also keeps a random head (possibly empty) of the
                bytes written after its last sync that extend the synced bytes, as a
                disk that flushed part of its cache before dying would.

        After this the layer is usable again, as a freshly booted machine: its plan
        is alive, with no fault armed (see
        [`FaultPlan.revive`][steadyloop.faults.FaultPlan.revive]).
        """
        for fd in list(self._paths):
            self.close(fd)
        for path, synced in self._synced.items():
            if not self._entry_durable.get(path, False):
                _unlink(path)
                continue
            current = super().read(path) or b""
            keep = synced
            if rng is not None and current.startswith(synced) and len(current) > len(synced):
                extra = current[len(synced) :]
                keep = synced + extra[: rng.randint(0, len(extra))]
            with open(path, "wb") as fh:
                fh.write(keep)
        self._synced.clear()
        self._entry_durable.clear()
        self._dropped.clear()
        self._cut_at = None
        self.plan.revive()


def _unlink(path: str) -> None:
    """Remove a file that may be missing."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
