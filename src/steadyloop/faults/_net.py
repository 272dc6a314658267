"""Network faults for tests, made in userspace on loopback: a TCP proxy that stalls, lags, resets.

[`FaultProxy`][steadyloop.faults.FaultProxy] sits between a client and a server
(``127.0.0.1`` only), as Toxiproxy does. It can:

* **stall**: forward nothing either way and hold new connections unanswered, but keep
  every socket open. The client sees no error and no reset, only silence, as with a
  lost route, except that the kernel still acknowledges what is sent, so TCP
  keepalives and ``tcp_user_timeout`` cannot fire through it (a true blackhole needs a
  network namespace). On ``resume`` the held bytes flow again, in order;
* **lag**: delay every round trip (each chunk the client sends, before it goes on to
  the server) by a [`Latency`][steadyloop.faults.Latency]: ``mean ± jitter`` seconds,
  and every ``stall_every``-th round trip by ``stall_for`` seconds instead. The
  delays are drawn from a seeded generator and kept in
  [`delays`][steadyloop.faults.FaultProxy], so a test checks them as numbers, not
  with a clock; bytes keep their order in each direction;
* **reset**: end every open connection with a TCP reset (``RST``), both to the client
  and to the server; connections made afterwards are forwarded as usual.

Examples:
    ```python
    async with FaultProxy("127.0.0.1", 5432, latency=Latency(0.2, 0.1, stall_every=20)) as proxy:
        url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
        ...
        proxy.reset()   # every connection gets an RST
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from dataclasses import dataclass
from types import TracebackType

__all__ = ["FaultProxy", "Latency"]

_RST = struct.pack("ii", 1, 0)
"""``SO_LINGER`` on with a zero timeout: closing the socket sends a reset, not a FIN."""


@dataclass(frozen=True, slots=True)
class Latency:
    """How long each round trip through a [`FaultProxy`][steadyloop.faults.FaultProxy] waits.

    Attributes:
        mean: The usual delay, in seconds.
        jitter: Each usual delay is drawn uniformly from ``mean ± jitter``.
        stall_every: Every ``stall_every``-th round trip (counted over all connections
            of the proxy) waits ``stall_for`` instead; 0 never stalls.
        stall_for: How long a stalled round trip waits, in seconds.

    Raises:
        ValueError: A negative delay, a jitter larger than the mean, or a negative
            ``stall_every``.
    """

    mean: float = 0.2
    jitter: float = 0.1
    stall_every: int = 0
    stall_for: float = 2.0

    def __post_init__(self) -> None:
        if self.mean < 0 or self.stall_for < 0:
            raise ValueError(
                f"Latency(mean={self.mean}, stall_for={self.stall_for}): delays are not negative"
            )
        if not 0 <= self.jitter <= self.mean:
            raise ValueError(
                f"Latency(jitter={self.jitter}): the jitter lies between 0 and the mean "
                f"({self.mean}), or a delay could be negative"
            )
        if self.stall_every < 0:
            raise ValueError(f"Latency(stall_every={self.stall_every}): 0 (never) or more")

    def delay(self, round_trip: int, rng: random.Random) -> float:
        """The delay of the ``round_trip``-th round trip (1-based)."""
        if self.stall_every and round_trip % self.stall_every == 0:
            return self.stall_for
        return rng.uniform(self.mean - self.jitter, self.mean + self.jitter)


class FaultProxy:
    """A loopback TCP proxy to ``(host, port)`` that forwards, stalls, lags or resets.

    Use ``async with FaultProxy(host, port) as proxy``; connect to ``proxy.port``.

    Args:
        host: The server's host.
        port: The server's port.
        latency: Delay every round trip so (None: forward at once); may be changed at
            any time through the attribute.
        seed: Seeds the jitter.

    Attributes:
        port: The proxy's own port on ``127.0.0.1`` (set on entering).
        latency: The current [`Latency`][steadyloop.faults.Latency], or None.
        connections: Connections forwarded to the server so far.
        round_trips: Chunks the clients sent so far (each one round trip).
        delays: The delay each round trip waited under a latency, in order.
        stalls: Round trips that waited ``stall_for``.
        resets: Connections ended with a reset.
    """

    def __init__(
        self, host: str, port: int, *, latency: Latency | None = None, seed: int | str = 0
    ) -> None:
        self.target = (host, port)
        self.port = 0
        self.latency = latency
        self.connections = 0
        self.round_trips = 0
        self.delays: list[float] = []
        self.stalls = 0
        self.resets = 0
        self._rng = random.Random(seed)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = False  # the proxy is ending its own connections' tasks

    @property
    def stalled(self) -> bool:
        """Whether the proxy holds every byte back."""
        return not self._flowing.is_set()

    def stall(self) -> None:
        """Forward nothing more (either way) and hold new connections, until `resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forward again, the held bytes first."""
        self._flowing.set()

    def reset(self) -> int:
        """End every open connection with a TCP reset, to the client and to the server.

        Returns:
            How many connections were reset.
        """
        pairs = list(self._pairs)
        for pair in pairs:
            self._pairs.discard(pair)
            for writer in pair:
                _abort_with_rst(writer)
        self.resets += len(pairs)
        return len(pairs)

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        self._closing = True
        self._flowing.set()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._flowing.wait()  # a connection made while stalled waits, unanswered
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._writers.add(up_writer)
            pair = (writer, up_writer)
            self._pairs.add(pair)
            self.connections += 1
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer, upstream=True)),
                asyncio.ensure_future(self._pump(up_reader, writer, upstream=False)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                self._pairs.discard(pair)
                up_writer.close()
                self._writers.discard(up_writer)
        except OSError:
            pass  # the server refused or dropped the connection: the client's is closed
        except asyncio.CancelledError:
            # Ended by the proxy's own exit: the task returns, not cancelled. (asyncio's
            # stream server asks a finished connection task for its exception, which
            # for a cancelled one before Python 3.12 logs a CancelledError traceback.)
            if not self._closing:
                raise
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        with contextlib.suppress(OSError):  # a reset ends the pump, not the proxy
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                if upstream:
                    self.round_trips += 1
                    latency = self.latency
                    if latency is not None:
                        delay = latency.delay(self.round_trips, self._rng)
                        self.delays.append(delay)
                        if latency.stall_every and self.round_trips % latency.stall_every == 0:
                            self.stalls += 1
                        await asyncio.sleep(delay)
                await self._flowing.wait()  # stalled: the bytes are held here, not dropped
                writer.write(data)
                await writer.drain()


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    """Close a connection with a reset: ``SO_LINGER`` zero, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    writer.transport.abort()
