"""Network faults for tests, made in userspace on loopback: a TCP proxy that can stall.

[`StallProxy`][] sits between a client and a server (``127.0.0.1`` only). While it is
stalled, it forwards nothing either way and holds new connections unanswered, but
keeps every socket open: the client sees no error and no reset, only silence, as
with a lost route (except that the kernel still acknowledges what is sent, so TCP
keepalives and ``tcp_user_timeout`` cannot fire through it). On ``resume`` the held
bytes flow again, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class StallProxy:
    """A loopback TCP proxy to ``(host, port)`` that forwards, or stalls when told to.

    Use ``async with StallProxy(host, port) as proxy``; connect to ``proxy.port``.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.connections = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

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

    async def __aenter__(self) -> StallProxy:
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
            self.connections += 1
            pumps = [
                asyncio.ensure_future(self._pump(reader, up_writer)),
                asyncio.ensure_future(self._pump(up_reader, writer)),
            ]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                up_writer.close()
                self._writers.discard(up_writer)
        except OSError:
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            await self._flowing.wait()  # stalled: the bytes are held here, not dropped
            writer.write(data)
            await writer.drain()
