"""The fault layer's TCP proxy: it forwards in order, lags within its bounds, stalls and resets.

The latency is checked as numbers (the delays the proxy drew, the round trips it counted,
the order of the replies), never with a clock: the only time-based check is a lower bound
that load can only make truer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator

import pytest

from steadyloop.faults import FaultProxy, Latency


class Echo:
    """A loopback server that answers every line with the same line, and counts what it got."""

    def __init__(self) -> None:
        self.received = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while line := await reader.readline():
                self.received += 1
                writer.write(line)
                await writer.drain()
        writer.close()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    server = Echo()
    server.server = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    server.port = int(server.server.sockets[0].getsockname()[1])
    async with server.server:
        yield server


async def _round_trips(port: int, count: int) -> list[bytes]:
    """Send ``count`` lines one at a time (each waits for its reply); return the replies."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 60)
    replies = []
    for i in range(count):
        writer.write(b"%d\n" % i)
        await writer.drain()
        replies.append(await asyncio.wait_for(reader.readline(), 60))
    writer.close()
    return replies


async def test_the_proxy_forwards_both_ways_in_order(echo: Echo) -> None:
    """Without a fault, every line reaches the server and comes back, in order."""
    async with FaultProxy("127.0.0.1", echo.port) as proxy:
        assert await _round_trips(proxy.port, 30) == [b"%d\n" % i for i in range(30)]
    assert proxy.round_trips == 30 and proxy.connections == 1 and not proxy.delays


async def test_latency_delays_every_round_trip_within_its_bounds_and_stalls_one_in_n(
    echo: Echo,
) -> None:
    """Under ``Latency(20 ms ± 10, 1 in 5 stalled for 50 ms)``: each delay in bounds, exactly the 5th, 10th, … stalled, replies in order."""
    latency = Latency(mean=0.02, jitter=0.01, stall_every=5, stall_for=0.05)
    loop = asyncio.get_running_loop()
    async with FaultProxy("127.0.0.1", echo.port, latency=latency, seed=7) as proxy:
        started = loop.time()
        replies = await _round_trips(proxy.port, 20)
        elapsed = loop.time() - started
    assert replies == [b"%d\n" % i for i in range(20)]
    assert proxy.round_trips == 20 and len(proxy.delays) == 20
    assert proxy.stalls == 4
    for n, delay in enumerate(proxy.delays, start=1):
        if n % 5 == 0:
            assert delay == 0.05
        else:
            assert 0.01 <= delay <= 0.03
    assert len(set(proxy.delays)) > 2  # the jitter varies
    # A lower bound (the loop may wake a timer a clock tick early): every delay was waited out.
    assert elapsed >= sum(proxy.delays) - 0.001


def test_latency_is_drawn_from_its_seed() -> None:
    """The same seed draws the same delays; the stalls fall on the same round trips."""
    latency = Latency(mean=0.2, jitter=0.1, stall_every=20, stall_for=2.0)
    first = [latency.delay(n, random.Random(3)) for n in range(1, 41)]
    again = [latency.delay(n, random.Random(3)) for n in range(1, 41)]
    assert first == again
    assert [n for n, d in enumerate(first, start=1) if d == 2.0] == [20, 40]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mean": -1.0, "jitter": 0.0}, "not negative"),
        ({"mean": 0.1, "jitter": 0.2}, "between 0 and the mean"),
        ({"stall_every": -1}, "0 \\(never\\) or more"),
    ],
)
def test_a_latency_configured_wrongly_says_what(kwargs: dict[str, float], message: str) -> None:
    """A negative delay, a jitter above the mean or a negative period is a ValueError saying so."""
    with pytest.raises(ValueError, match=message):
        Latency(**kwargs)  # type: ignore[arg-type]


async def test_a_stalled_proxy_holds_the_bytes_and_delivers_them_on_resume(echo: Echo) -> None:
    """While stalled nothing reaches the server; on resume the held line arrives and is answered."""
    async with FaultProxy("127.0.0.1", echo.port) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"a\n")
        assert await asyncio.wait_for(reader.readline(), 60) == b"a\n"
        proxy.stall()
        writer.write(b"b\n")
        await writer.drain()
        for _ in range(50):  # give a forwarding proxy every chance to forward
            await asyncio.sleep(0.001)
        assert echo.received == 1 and proxy.stalled
        proxy.resume()
        assert await asyncio.wait_for(reader.readline(), 60) == b"b\n"
        writer.close()
    assert echo.received == 2


async def test_reset_ends_every_open_connection_with_an_rst(echo: Echo) -> None:
    """After ``reset`` the client's next read fails with a reset; a new connection is forwarded."""
    async with FaultProxy("127.0.0.1", echo.port) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"a\n")
        assert await asyncio.wait_for(reader.readline(), 60) == b"a\n"
        assert proxy.reset() == 1
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 60)
        writer.close()
        assert await _round_trips(proxy.port, 2) == [b"0\n", b"1\n"]
    assert proxy.resets == 1 and proxy.connections == 2


async def test_leaving_the_proxy_with_connections_open_logs_nothing(
    echo: Echo, caplog: pytest.LogCaptureFixture
) -> None:
    """Exiting the proxy while clients are still connected ends their connections quietly: no asyncio error is logged."""
    caplog.set_level(logging.DEBUG, logger="asyncio")
    async with FaultProxy("127.0.0.1", echo.port) as proxy:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", proxy.port), 60
        )
        writer.write(b"x\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), 60) == b"x\n"
    assert await asyncio.wait_for(reader.read(), 60) == b""  # the proxy closed it
    writer.close()
    await asyncio.sleep(0.1)  # callbacks of the ended connection tasks run
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
