"""The file layer under file-based backends.

Every file operation the JSONL backend performs goes through a
[`Files`][steadyloop.journal.Files] object, so a test can swap in
[`steadyloop.testing.FaultyFiles`][steadyloop.testing.FaultyFiles], which cuts writes at a
chosen byte and simulates power loss by dropping what was never synced.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from steadyloop._errors import BackendUnavailable, JournalLocked

__all__ = ["FileLock", "Files", "fsync_directory"]


def fsync_directory(path: str | os.PathLike[str]) -> None:
    """Sync a directory, so that files created in it survive power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLock:
    """An exclusive, non-blocking ``flock`` on a lock file, held until released.

    ``flock`` locks belong to an open file description, so two journals in one
    process exclude each other just as two processes do. The holder's pid is written
    into the file so the error can name it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, what: str) -> None:
        """Take the lock or raise [`JournalLocked`][steadyloop.JournalLocked] naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            try:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                who = f" (pid {holder})" if holder else ""
                raise JournalLocked(
                    f"{what} is held by another writer{who}; close that journal first"
                ) from None
            raise BackendUnavailable(f"{what}: cannot lock {self.path}: {exc}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (closing the descriptor releases the ``flock``)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class Files:
    """Plain POSIX file operations. Subclassed by the fault-injecting layer."""

    def read(self, path: str) -> bytes | None:
        """Return a file's bytes, or ``None`` if it does not exist."""
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def open_append(self, path: str) -> tuple[int, bool]:
        """Open a file for appending, creating it if needed.

        Returns:
            The descriptor, and whether the file was created (the caller must then
                sync the directory).
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
            return fd, True
        except FileExistsError:
            return os.open(path, os.O_RDWR | os.O_APPEND), False

    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data`` at the end of the file."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def sync(self, fd: int) -> None:
        """Make everything written to ``fd`` durable."""
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        """Cut the file to ``size`` bytes."""
        os.ftruncate(fd, size)

    def sync_directory(self, path: str) -> None:
        """Make the directory's entries (new files) durable."""
        fsync_directory(path)

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        os.close(fd)

    def listdir(self, path: str) -> list[str]:
        """List a directory's entries."""
        return sorted(os.listdir(path))

    def remove(self, path: str) -> None:
        """Remove a file if it exists."""
        Path(path).unlink(missing_ok=True)
