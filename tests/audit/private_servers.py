"""Private PostgreSQL and MariaDB servers a chaos test starts, restarts and kills.

Never the shared servers the rest of the suite uses: each instance is made with
``initdb`` or ``mariadb-install-db`` in a temporary folder, listens on a port of its
own, and is removed when the test ends. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(argv: list[str], timeout: float = 120) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise OSError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def _server_folder(kind: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"sl-audit-{kind}-"))
    root.chmod(0o755)
    return root


def _as(user: str, argv: list[str]) -> list[str]:
    return argv if os.geteuid() != 0 else ["runuser", "-u", user, "--", *argv]


class PrivatePostgres:
    """A PostgreSQL instance of the test's own (``initdb`` in ``root``), fsync on.

    Its folder (data directory, socket, log) is a new one under the system's temp folder,
    which the server's user can reach (a test's own ``tmp_path`` is private to root).

    Args:
        listen: ``listen_addresses`` (``*`` reaches it from a test's network namespace).
    """

    def __init__(self, *, listen: str = "127.0.0.1") -> None:
        self.root = _server_folder("pg")
        self.data = self.root / "data"
        self.port = free_port()
        self.listen = listen
        self.restarts = 0
        self.kills = 0

    def url(self, host: str = "127.0.0.1", port: int | None = None) -> str:
        """The URL of its ``postgres`` database, through ``host:port`` (itself by default)."""
        return f"postgresql://postgres@{host}:{port or self.port}/postgres"

    def __enter__(self) -> PrivatePostgres:
        shutil.chown(self.root, "postgres")
        _run(_as("postgres", ["initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres"]))
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 10.201.0.0/16 trust\n")
        self.start()
        return self

    def start(self) -> None:
        """Start it (after a kill, once the dead postmaster's children are gone)."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses='{self.listen}' "
            "-c fsync=on -c synchronous_commit=on -c max_connections=200"
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                _run(
                    _as(
                        "postgres",
                        [
                            "pg_ctl",
                            "-D",
                            str(self.data),
                            "-l",
                            str(self.root / "log.txt"),
                            "-w",
                            "-t",
                            "60",
                            "-o",
                            options,
                            "start",
                        ],
                    )
                )
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast``: roll back open transactions, checkpoint, exit)."""
        _run(_as("postgres", ["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"]))

    def restart(self) -> None:
        """Stop it cleanly and start it again."""
        self.stop()
        self.start()
        self.restarts += 1

    def postmaster(self) -> int:
        """The postmaster's pid."""
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill_postmaster(self) -> None:
        """SIGKILL the postmaster, wait for its backends to die, start it (crash recovery)."""
        pid = self.postmaster()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._backends():
            time.sleep(0.1)
        self.start()
        self.kills += 1

    def _backends(self) -> list[int]:
        """Live processes whose command line names this instance's port or data folder."""
        out = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{name}/stat").read_text()
                if stat[stat.rfind(")") + 2] == "Z":
                    continue
                if Path(f"/proc/{name}/cwd").resolve() == self.data.resolve():
                    out.append(int(name))
        return out

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateMariaDB:
    """A MariaDB instance of the test's own (``mariadb-install-db`` in ``root``).

    Its folder (data directory, socket, log) is a new one under the system's temp folder.
    """

    def __init__(self) -> None:
        self.root = _server_folder("mariadb")
        self.data = self.root / "data"
        self.socket = self.root / "mysqld.sock"
        self.port = free_port()
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self) -> str:
        """The URL of its ``test`` database, as root."""
        return f"mysql://root@127.0.0.1:{self.port}/test"

    def __enter__(self) -> PrivateMariaDB:
        shutil.chown(self.root, "mysql")
        _run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.data}",
                "--user=mysql",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
        )
        self.start()
        _run(
            [
                "mariadb",
                "--no-defaults",
                f"--socket={self.socket}",
                "-uroot",
                "-e",
                "CREATE DATABASE IF NOT EXISTS test; CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; "
                "GRANT ALL ON *.* TO 'root'@'127.0.0.1'; FLUSH PRIVILEGES;",
            ]
        )
        return self

    def start(self) -> None:
        """Start it and wait until it answers."""
        log = open(self.root / "log.txt", "ab")  # noqa: SIM115 - the server's, kept open
        self._proc = subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={self.data}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.socket}",
                f"--pid-file={self.root / 'mysqld.pid'}",
                "--user=mysql",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=1",
                "--max-connections=300",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ping = subprocess.run(
                ["mariadb-admin", "--no-defaults", f"--socket={self.socket}", "-uroot", "ping"],
                capture_output=True,
                timeout=10,
                check=False,
            )
            if ping.returncode == 0:
                return
            time.sleep(0.2)
        raise OSError(f"MariaDB in {self.root} did not answer within 60 s")

    def stop(self) -> None:
        """Stop it with SIGTERM (a clean shutdown) and wait for it to exit."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def restart(self) -> None:
        """Stop it cleanly and start it again."""
        self.stop()
        self.start()
        self.restarts += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
