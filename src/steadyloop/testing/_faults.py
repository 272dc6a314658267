"""A fault-injecting file layer: cut a write at any byte, or lose power.

[`FaultyFiles`][steadyloop.testing.FaultyFiles] wraps the real file layer of the JSONL backend.
It keeps, for every file it touches, the bytes that were last made durable (by ``fsync``) and
whether the file's directory entry was made durable (by syncing the directory). From that it
can:

* **cut** the stream of written bytes at any offset: the write that crosses the offset
  writes only its head, then the "process" dies
  ([`SimulatedCrash`][steadyloop.testing.SimulatedCrash]), and every later operation dies too;
* **crash before an operation**: the N-th mutating operation (write, sync, truncate,
  directory sync) dies before it does anything;
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

from steadyloop.journal._files import Files

__all__ = ["FaultyFiles", "SimulatedCrash"]


class SimulatedCrash(BaseException):
    """The simulated process died here.

    It derives from `BaseException`, like `KeyboardInterrupt`, so code
    under test that catches `Exception` cannot swallow a crash.
    """


class FaultyFiles(Files):
    """A [`Files`][steadyloop.journal.Files] that can crash and lose power on command.

    Attributes:
        bytes_written: Bytes written through this layer so far.
        operations: Mutating operations performed so far.
        syncs: ``fsync`` calls (files and directories) performed so far.
        crashed: Whether the simulated process has died.
    """

    def __init__(self) -> None:
        self.bytes_written = 0
        self.operations = 0
        self.syncs = 0
        self.crashed = False
        self._cut_at: int | None = None
        self._crash_before: int | None = None
        self._paths: dict[int, str] = {}
        self._synced: dict[str, bytes] = {}
        self._entry_durable: dict[str, bool] = {}
        self._failing_syncs = 0
        self._dropped: dict[str, list[tuple[int, int]]] = {}

    # -- arming -----------------------------------------------------------------------

    def cut_after(self, nbytes: int) -> None:
        """Die when the total bytes written would pass ``nbytes``; write only up to it."""
        self._cut_at = nbytes

    def crash_before(self, operation: int) -> None:
        """Die just before the ``operation``-th mutating operation (counting from 1)."""
        self._crash_before = operation

    def fail_syncs(self, count: int = 1) -> None:
        """Make the next ``count`` file syncs fail with ``EIO``, dropping what they held."""
        self._failing_syncs = count

    def _tick(self) -> None:
        if self.crashed:
            raise SimulatedCrash("the process already died")
        self.operations += 1
        if self._crash_before is not None and self.operations >= self._crash_before:
            self.crashed = True
            raise SimulatedCrash(f"crash before operation {self.operations}")

    # -- the file operations -------------------------------------------------------

    def read(self, path: str) -> bytes | None:
        """Read a file (the dead read nothing)."""
        if self.crashed:
            raise SimulatedCrash("the process already died")
        return super().read(path)

    def open_append(self, path: str) -> tuple[int, bool]:
        """Open for appending, remembering what was durable before."""
        if self.crashed:
            raise SimulatedCrash("the process already died")
        fd, created = super().open_append(path)
        self._paths[fd] = path
        if path not in self._synced:
            self._synced[path] = b"" if created else (super().read(path) or b"")
            self._entry_durable[path] = not created
        return fd, created

    def write(self, fd: int, data: bytes) -> None:
        """Write, or write a head of ``data`` and die if the cut point falls inside it."""
        self._tick()
        if self._cut_at is not None and self.bytes_written + len(data) > self._cut_at:
            head = data[: max(0, self._cut_at - self.bytes_written)]
            if head:
                super().write(fd, head)
            self.bytes_written += len(head)
            self.crashed = True
            raise SimulatedCrash(f"write cut after byte {self._cut_at}")
        super().write(fd, data)
        self.bytes_written += len(data)

    def sync(self, fd: int) -> None:
        """Sync, and remember the file's bytes as durable (but for dropped ones).

        Raises:
            OSError: ``EIO``, when armed by
                [`fail_syncs`][steadyloop.testing.FaultyFiles.fail_syncs].
        """
        self._tick()
        path = self._paths[fd]
        current = super().read(path) or b""
        if self._failing_syncs > 0:
            self._failing_syncs -= 1
            durable = len(self._synced.get(path, b""))
            if len(current) > durable:
                self._dropped.setdefault(path, []).append((durable, len(current)))
            raise OSError(errno.EIO, "Input/output error (a simulated fsync failure)", path)
        super().sync(fd)
        self.syncs += 1
        for start, stop in self._dropped.get(path, ()):
            end = min(stop, len(current))
            if start < end:  # marked clean after the failure: never reached the disk
                current = current[:start] + bytes(end - start) + current[end:]
        self._synced[path] = current

    def truncate(self, fd: int, size: int) -> None:
        """Truncate (not durable until the next sync)."""
        self._tick()
        super().truncate(fd, size)
        path = self._paths.get(fd)
        if path in self._dropped:
            kept = [(a, min(b, size)) for a, b in self._dropped[path] if a < size]
            self._dropped[path] = kept

    def sync_directory(self, path: str) -> None:
        """Sync a directory: files created in it so far become durable entries."""
        self._tick()
        super().sync_directory(path)
        self.syncs += 1
        for file_path in self._entry_durable:
            if os.path.dirname(file_path) == os.path.normpath(path):
                self._entry_durable[file_path] = True

    def remove(self, path: str) -> None:
        """Remove a file (treated as durable at once, as the journal syncs after it)."""
        self._tick()
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

        After this the layer is usable again, as a freshly booted machine.
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
        self._failing_syncs = 0
        self.crashed = False
        self._cut_at = None
        self._crash_before = None


def _unlink(path: str) -> None:
    """Remove a file that may be missing."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
