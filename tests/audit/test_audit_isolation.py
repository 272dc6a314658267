"""Verify commands die with their worker, and the isolating executor keeps its secrets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from audit_helpers import marked, new_marker, wait_for

from backends import IN_CI
from steadyloop.audit import BubblewrapExecutor, ExecutorUnavailable, SubprocessExecutor

HERE = Path(__file__).parent


@pytest.fixture
def bubblewrap() -> None:
    """Skip (outside CI) or fail (in CI, where .ci/run installs it) without a working bwrap."""
    try:
        BubblewrapExecutor()
    except ExecutorUnavailable as exc:
        if IN_CI:
            raise
        pytest.skip(str(exc))


def daemon_command(marker: str) -> list[str]:
    """A command that leaves a setsid double-forked daemon and a child, then waits."""
    seconds = f"900.{marker}"  # sleep takes fractions: the marker makes it unique
    return [
        "sh",
        "-c",
        f"(setsid sh -c 'sleep {seconds}' >/dev/null 2>&1 &); sleep {seconds} & sleep {seconds}",
    ]


@pytest.mark.parametrize("isolate", [False, True], ids=["subprocess", "bubblewrap"])
def test_a_sigkilled_worker_takes_its_verify_command_and_its_daemon_with_it(
    tmp_path: Path, isolate: bool, request: pytest.FixtureRequest
) -> None:
    """After a SIGKILL of the worker, no process of its verify command is left, a setsid daemon included."""
    if isolate:
        request.getfixturevalue("bubblewrap")
    marker = new_marker()
    seconds = daemon_command(marker)
    code = (
        "import asyncio, sys\n"
        "from steadyloop.audit import BubblewrapExecutor, SubprocessExecutor\n"
        f"ex = BubblewrapExecutor() if {isolate} else SubprocessExecutor()\n"
        f"asyncio.run(ex.run({seconds!r}, cwd={str(tmp_path)!r}, timeout=60))\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    try:
        assert wait_for(lambda: len(marked(marker)) >= 3, 15), marked(marker)
        worker.kill()
        worker.wait()
        assert wait_for(lambda: not marked(marker), 3), marked(marker)
    finally:
        worker.kill()
        for pid in marked(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("isolate", [False, True], ids=["subprocess", "bubblewrap"])
async def test_a_timeout_kills_the_whole_tree(
    tmp_path: Path, isolate: bool, request: pytest.FixtureRequest
) -> None:
    """A command past its timeout is reported as such, and nothing it started is left running."""
    if isolate:
        request.getfixturevalue("bubblewrap")
    marker = new_marker()
    executor = BubblewrapExecutor() if isolate else SubprocessExecutor()
    result = await executor.run(daemon_command(marker), cwd=tmp_path, timeout=1.0)
    assert result.status == "timeout"
    assert await asyncio.to_thread(wait_for, lambda: not marked(marker), 3), marked(marker)


async def test_an_exiting_command_leaves_no_daemon_behind(tmp_path: Path) -> None:
    """A command that exits at once after starting a setsid daemon leaves nothing running."""
    marker = new_marker()
    argv = ["sh", "-c", f"(setsid sleep 950.{marker} >/dev/null 2>&1 &); echo started"]
    result = await SubprocessExecutor().run(argv, cwd=tmp_path, timeout=10)
    assert result.ok and result.stdout == "started\n"
    assert await asyncio.to_thread(wait_for, lambda: not marked(marker), 3), marked(marker)


def probe(kind: str, tmp_path: Path) -> tuple[dict[str, str], tuple[str, str, str]]:
    """What a probing verify command saw under a worker holding three planted secrets."""
    env_secret, unasked_secret, file_secret = (
        f"{name}-{uuid.uuid4().hex}" for name in ("env", "unasked", "file")
    )
    secret_file = tmp_path / "secret.txt"
    secret_file.write_text(file_secret)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "seen.json"
    env = {**os.environ, "PLANTED_TOKEN": env_secret, "ALLOWED_BUT_UNASKED": unasked_secret}
    subprocess.run(
        [sys.executable, str(HERE / "audit_secret_worker.py"), kind, secret_file, work, out],
        env=env,
        check=True,
        timeout=120,
    )
    seen = json.loads(out.read_text())
    assert "== done" in seen["stdout"], seen["stderr"][-2000:]  # the probe ran to its end
    assert "WORKER_PID=" in seen["stdout"]  # and `env` printed the command's environment
    return seen, (env_secret, unasked_secret, file_secret)


@pytest.mark.usefixtures("bubblewrap")
def test_the_isolating_executor_keeps_three_planted_secrets(tmp_path: Path) -> None:
    """A verify command trying env, /proc/$PPID/environ, /proc/*/environ and the worker's open files gets none of three planted secrets."""
    seen, secrets = probe("bubblewrap", tmp_path)
    text = "\n".join(seen.values())
    for secret in secrets:
        assert secret not in text


def test_the_plain_executor_leaves_proc_open_as_its_docs_say(tmp_path: Path) -> None:
    """The plain executor scrubs the environment only: /proc still shows the worker's secrets, as documented."""
    seen, (env_secret, unasked_secret, file_secret) = probe("subprocess", tmp_path)
    env_part = seen["stdout"].split("== parent")[0]
    assert env_secret not in env_part and unasked_secret not in env_part
    text = "\n".join(seen.values())
    assert env_secret in text and file_secret in text


@pytest.mark.usefixtures("bubblewrap")
async def test_the_sandbox_has_a_read_only_root_and_a_writable_workdir(tmp_path: Path) -> None:
    """Inside the sandbox only the working directory can be written; with network=False only lo is there."""
    outside = Path("/var/tmp") / f"steadyloop-{new_marker()}"
    private = tmp_path / "private.txt"
    work = tmp_path / "work"
    work.mkdir()
    script = (
        f"echo x > {outside} && echo wrote-outside; echo x > {private}; "
        "echo y > inside.txt && echo wrote-inside; "
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    )
    result = await BubblewrapExecutor(network=False).run(["sh", "-c", script], cwd=work)
    assert "wrote-inside" in result.stdout and "wrote-outside" not in result.stdout
    assert not outside.exists() and not private.exists()  # /tmp is the sandbox's own
    assert (work / "inside.txt").read_text() == "y\n"
    assert result.stdout.split()[1:] == ["lo"], result.stdout


def test_missing_bubblewrap_is_one_clear_line_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without bwrap the isolating executor refuses to start, naming the package; nothing runs unisolated."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExecutorUnavailable) as info:
        BubblewrapExecutor()
    assert "bubblewrap" in str(info.value) and "\n" not in str(info.value)


def _tool(folder: Path, body: str = "#!/bin/sh\necho hi\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "sl-tool"
    tool.write_text(body)
    tool.chmod(0o755)
    return tool


@pytest.mark.usefixtures("bubblewrap")
async def test_an_executable_the_sandbox_does_not_show_is_missing(tmp_path: Path) -> None:
    """A tool under /tmp, under a hidden path, or with its interpreter there is `missing` inside the sandbox, not exit 1."""
    work = tmp_path / "work"
    work.mkdir()
    venv = Path(tempfile.mkdtemp(prefix="steadyloop-venv-", dir="/tmp"))
    hidden = Path("/var/tmp") / f"steadyloop-hidden-{new_marker()}"
    try:
        in_tmp = _tool(venv / "bin")
        in_hidden = _tool(hidden)
        sandbox = BubblewrapExecutor(hide=[hidden])
        plain = await SubprocessExecutor().run([str(in_tmp)], cwd=work)
        assert plain.ok and plain.stdout == "hi\n"  # the worker sees it

        by_path = await sandbox.run(
            ["sl-tool"], cwd=work, env={"PATH": f"{venv}/bin:/usr/bin:/bin"}
        )
        assert by_path.status == "missing" and by_path.exit_code is None, by_path
        assert by_path.stderr.startswith("executable 'sl-tool' not found inside the sandbox")
        assert (
            f"{in_tmp} is under /tmp" in by_path.stderr and "virtual environment" in by_path.stderr
        )
        assert by_path.summary().startswith(
            "`sl-tool` was not found: executable 'sl-tool' not found"
        )

        hid = await sandbox.run([str(in_hidden)], cwd=work)
        assert hid.status == "missing", hid
        assert f"{in_hidden} is under {hidden}, which the sandbox hides" in hid.stderr

        script = _tool(work, f"#!{venv}/bin/sl-tool\n")  # its interpreter is under /tmp
        interp = await sandbox.run(["./sl-tool"], cwd=work)
        assert interp.status == "missing" and "#! interpreter" in interp.stderr, interp
        assert script.exists()

        failing = await sandbox.run(["sh", "-c", "echo no >&2; exit 1"], cwd=work)
        assert failing.status == "exited" and failing.exit_code == 1 and failing.stderr == "no\n"
    finally:
        shutil.rmtree(venv)
        shutil.rmtree(hidden)


@pytest.mark.parametrize(
    "attack",
    [
        "kill -9 $PPID",  # the supervisor (or, boxed, the namespace's init)
        "kill -9 -1",  # every process the command may signal
        "kill -9 $(ps -o ppid= -p $PPID)",  # the parent's parent
    ],
    ids=["parent", "everything", "grandparent"],
)
async def test_a_command_that_kills_its_supervisor_leaves_no_daemon(
    tmp_path: Path, attack: str
) -> None:
    """A verify command that starts a setsid daemon and then SIGKILLs the processes above it leaves nothing running."""
    marker = new_marker()
    argv = ["sh", "-c", f"setsid sleep 940.{marker} & sleep 0.5; {attack}; sleep 0.2"]
    result = await SubprocessExecutor().run(argv, cwd=tmp_path, timeout=20)
    assert result.status != "timeout", result
    try:
        assert await asyncio.to_thread(wait_for, lambda: not marked(marker), 3), marked(marker)
    finally:
        for pid in marked(marker):
            os.kill(pid, signal.SIGKILL)


def _listening_tcp() -> set[tuple[str, int]]:
    """Every listening TCP port of the machine, on loopback and on each of its addresses."""
    ports = {5432, 3306, 6379}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    hosts = {"127.0.0.1", "::1"}
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None):
            hosts.add(str(info[4][0]))
    return {(host, port) for host in hosts for port in ports}


def _unix_sockets() -> set[str]:
    """Every Unix socket of the machine with a name: bound ones, and socket files found."""
    out: set[str] = set()
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if len(fields) >= 8:
                out.add(fields[7])
    for top in ("/run", "/var/run", "/tmp", "/var/lib"):
        for folder, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        out.add(path)
    return out


def _connects(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        try:
            s.connect("\0" + path[1:] if path.startswith("@") else path)
        except OSError:
            return False
        return True


@pytest.mark.usefixtures("bubblewrap")
async def test_without_network_the_sandbox_reaches_no_server_on_the_machine(
    tmp_path: Path,
) -> None:
    """With network=False no server of the machine is reachable, by TCP or by any Unix socket."""
    unix = _unix_sockets()
    reachable = sorted(p for p in unix if _connects(p))
    if not reachable:
        pytest.skip("no Unix socket of a server on this machine to try")
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"unix": sorted(unix), "tcp": sorted(_listening_tcp())}))
    # Beside the targets, in the test's own folder the sandbox sees (a clone under /tmp
    # is hidden from it, and the probe with it).
    probe = str(tmp_path / "sandbox_socket_probe.py")
    shutil.copyfile(HERE / "sandbox_socket_probe.py", probe)
    # The base interpreter, not a virtual environment's (a clone under /tmp puts its
    # .venv where the sandbox's own /tmp hides it); the probe needs the standard library only.
    python = os.path.realpath(sys.executable)
    result = await BubblewrapExecutor(network=False).run(
        [python, "-I", "-S", probe, str(targets)], cwd=tmp_path
    )
    assert result.ok, result.stderr
    report = json.loads(result.stdout)
    tried = {r["target"] for r in report["results"]}
    assert all(f"unix:{p}:{socket.SOCK_STREAM}" in tried for p in reachable)
    assert len(tried) >= 3 * len(unix) + 6
    connected = [r["target"] for r in report["results"] if r["connected"]]
    assert connected == [], f"reached from the sandbox: {connected}"
    # What needs no server still works: a socket pair, and the sandbox's own loopback.
    assert report["socketpair"] and report["own_loopback"]


@pytest.mark.usefixtures("bubblewrap")
async def test_without_network_psql_cannot_reach_the_local_server_through_its_socket(
    tmp_path: Path,
) -> None:
    """A query by psql through /var/run/postgresql runs outside, and fails inside the sandbox."""
    command = ["psql", "-h", "/var/run/postgresql", "-U", "postgres", "-Atc", "select 1"]
    if shutil.which("psql") is None or not os.path.exists("/var/run/postgresql/.s.PGSQL.5432"):
        pytest.skip("no psql, or no PostgreSQL socket in /var/run/postgresql")
    outside = await SubprocessExecutor().run(command, cwd=tmp_path)
    if not outside.ok:
        pytest.skip(f"psql cannot log in outside the sandbox either: {outside.stderr.strip()}")
    assert outside.stdout.strip() == "1"
    inside = await BubblewrapExecutor(network=False).run(command, cwd=tmp_path)
    assert not inside.ok and "1" not in inside.stdout.split()
    assert "Operation not permitted" in inside.stderr, inside.stderr
    networked = await BubblewrapExecutor(network=True).run(command, cwd=tmp_path)
    assert networked.ok  # with the network on, as documented, the socket is there


@pytest.mark.usefixtures("bubblewrap")
def test_without_network_on_a_machine_the_filter_does_not_know_nothing_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no socket filter can be built, network=False refuses in one line instead of leaving Unix sockets open."""
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(ExecutorUnavailable) as info:
        BubblewrapExecutor(network=False)
    assert "'riscv64'" in str(info.value) and "\n" not in str(info.value)
    BubblewrapExecutor(network=True)  # with the network on, no filter is needed
