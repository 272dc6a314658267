"""The fault layer's blackhole: a namespace's route goes dark with no reset, and comes back."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading

import pytest

from steadyloop.faults import Blackhole

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="a network namespace needs root (ip netns)"
)

CLIENT = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 1000)
s.sendall(b"ping\\n"); assert s.recv(16) == b"ping\\n"
print("connected", flush=True)
sys.stdin.readline()
try:
    s.sendall(b"again\\n")
    print("reply", s.recv(16), flush=True)
except OSError as exc:
    print("error", exc.errno, flush=True)
"""


def _serve(server: socket.socket) -> None:
    """Echo every connection's bytes until the server socket closes."""
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=_echo, args=(conn,), daemon=True).start()


def _echo(conn: socket.socket) -> None:
    with conn, contextlib.suppress(OSError):  # the dark client's connection just dies
        while data := conn.recv(64):
            conn.sendall(data)


def _client(hole: Blackhole, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        hole.command([sys.executable, "-c", CLIENT, hole.host_ip, str(port)]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_blackholed_route_times_the_client_out_with_no_reset_and_comes_back() -> None:
    """Dark: the client's TCP_USER_TIMEOUT fires (ETIMEDOUT, not a reset); restored: a new client is answered."""
    with Blackhole(subnet=77) as hole:
        server = socket.create_server((hole.host_ip, 0))
        port = server.getsockname()[1]
        threading.Thread(target=_serve, args=(server,), daemon=True).start()
        try:
            dark = _client(hole, port)
            assert dark.stdout is not None and dark.stdin is not None
            assert dark.stdout.readline().strip() == "connected", dark.stderr
            hole.blackhole()
            dark.stdin.write("go\n")
            dark.stdin.flush()
            out, err = dark.communicate(timeout=120)
            assert out.split() == ["error", str(110)], err  # ETIMEDOUT: nothing came back
            hole.restore()
            light = _client(hole, port)
            assert light.stdout is not None and light.stdin is not None
            assert light.stdout.readline().strip() == "connected", light.stderr
            light.stdin.write("go\n")
            light.stdin.flush()
            out, err = light.communicate(timeout=120)
            assert out.strip() == "reply b'again\\n'", err
        finally:
            server.close()
    assert (
        subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True
        ).stdout.count(hole.name)
        == 0
    )
