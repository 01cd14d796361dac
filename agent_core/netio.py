"""An asyncio-native network backend for httpcore, under opsbot's MCP connection pools.

httpx's default backend goes through anyio for every read and write: a ``fail_after``
cancel scope, a socket stream that checkpoints (``sleep(0)``) and asks sniffio which event
loop runs, and for TLS anyio's own ``TLSStream`` over ``ssl.MemoryBIO``. An agent turn makes
a handful of HTTP requests to its MCP servers, each a write and a few reads, and all of that
was client CPU on every one. ``AsyncioBackend`` reads from an ``asyncio.Protocol``'s buffer
(data the loop already received is returned without waiting), times out with one timer
handle, and uses the loop's own TLS (``loop.start_tls``). It is used only on the event loop
that opened the connection, which is how ``agent_core.transport.ConnectionPools`` uses it.

httpcore's errors are kept: ``ConnectError``/``ConnectTimeout`` while connecting or in the
TLS handshake, ``ReadError``/``ReadTimeout`` and ``WriteError``/``WriteTimeout`` after.
"""

from __future__ import annotations

import asyncio
import ssl
import typing
from collections.abc import Coroutine, Iterable

import httpcore

# Reading pauses while this much is received and not yet read (a large answer arriving
# faster than the client parses it), and resumes once the buffer is below the low mark.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """What the loop received on one connection, and whether it ended."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.reading_paused = False
        self.writing_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = typing.cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self.eof = True
        self._wake()
        return None  # the transport closes itself: HTTP/1.1 sends nothing after the peer's end

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        if exc is not None and self.error is None:
            self.error = exc
        self._wake()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- used by the stream -------------------------------------------------------------

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self, max_bytes: int) -> bytes:
        buffer = self.buffer
        if len(buffer) <= max_bytes:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:max_bytes])
            del buffer[:max_bytes]
        if self.reading_paused and len(buffer) < LOW_WATER and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return data

    async def received(self, limit: float | None) -> None:
        """Wait until data, the end, or ``limit`` seconds (``TimeoutError``)."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await _within(waiter, limit)

    async def drained(self, limit: float | None) -> None:
        """Wait until the transport takes writes again (or the connection is lost)."""
        waiter = self._drained = asyncio.get_running_loop().create_future()
        await _within(waiter, limit)


async def _within(waiter: asyncio.Future[None], limit: float | None) -> None:
    # One timer handle: cheaper than an ``asyncio.timeout`` scope on every read.
    if limit is None:
        await waiter
        return
    timer = asyncio.get_running_loop().call_later(limit, _expire, waiter)
    try:
        await waiter
    finally:
        timer.cancel()


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection (plain, or TLS after ``start_tls``) for httpcore."""

    def __init__(self, connection: _Connection, *, tls: bool = False) -> None:
        self._connection = connection
        self._tls = tls

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        connection = self._connection
        if not connection.buffer and not connection.eof:
            try:
                await connection.received(timeout)
            except TimeoutError as exc:
                raise httpcore.ReadTimeout(exc) from exc
        if connection.buffer:
            return connection.take(max_bytes)
        if connection.error is not None:
            raise httpcore.ReadError(connection.error) from connection.error
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        connection = self._connection
        transport = connection.transport
        if transport is None or transport.is_closing():
            raise httpcore.WriteError(connection.error or "the connection is closed")
        try:
            transport.write(buffer)
        except (OSError, RuntimeError) as exc:
            raise httpcore.WriteError(exc) from exc
        if connection.writing_paused:
            try:
                await connection.drained(timeout)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(exc) from exc
            if connection.error is not None:
                raise httpcore.WriteError(connection.error) from connection.error

    async def aclose(self) -> None:
        transport = self._connection.transport
        if transport is None:
            return
        if self._tls:
            # Like httpcore's anyio backend (``standard_compatible=False``): no wait for the
            # peer's close_notify, which asyncio's TLS close would wait for up to 30 s.
            transport.abort()
        else:
            transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        connection = self._connection
        transport = connection.transport
        if transport is None or transport.is_closing():
            raise httpcore.ConnectError("the connection is closed")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                tls = await loop.start_tls(
                    transport, connection, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError as exc:
            transport.abort()
            raise httpcore.ConnectTimeout(exc) from exc
        except (OSError, ConnectionError) as exc:  # ssl.SSLError is an OSError
            transport.abort()
            raise httpcore.ConnectError(exc) from exc
        if tls is None:  # the peer closed during the handshake
            transport.abort()
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        connection.transport = tls
        return AsyncioStream(connection, tls=True)

    def get_extra_info(self, info: str) -> typing.Any:
        connection = self._connection
        transport = connection.transport
        if info == "is_readable":
            # httpcore asks of an idle connection: has the server closed it (or sent more)?
            return bool(
                connection.buffer or connection.eof or transport is None or transport.is_closing()
            )
        if transport is None:
            return None
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        return None


async def _connected(
    opening: Coroutine[typing.Any, typing.Any, tuple[asyncio.BaseTransport, _Connection]],
    within: float | None,
    socket_options: Iterable[SocketOption] | None,
) -> httpcore.AsyncNetworkStream:
    """The stream of a connection being opened (in ``within`` seconds), with httpcore's errors
    for a failed open."""
    try:
        async with asyncio.timeout(within):
            transport, connection = await opening
    except TimeoutError as exc:
        raise httpcore.ConnectTimeout(exc) from exc
    except OSError as exc:
        raise httpcore.ConnectError(exc) from exc
    _set_options(transport, socket_options)
    return AsyncioStream(connection)


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on the running asyncio loop (see the module)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        local = (local_address, 0) if local_address else None
        loop = asyncio.get_running_loop()
        opening = loop.create_connection(_Connection, host, port, local_addr=local)
        return await _connected(opening, timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        opening = asyncio.get_running_loop().create_unix_connection(_Connection, path)
        return await _connected(opening, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _set_options(transport: asyncio.BaseTransport, options: Iterable[SocketOption] | None) -> None:
    if options:
        sock = transport.get_extra_info("socket")
        for option in options:
            sock.setsockopt(*option)
