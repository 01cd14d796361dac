"""Serve an ASGI app (the dev IdP, the MCP servers, the sandbox) on a pre-bound socket.

Binding first and serving second lets a caller learn every port before any server starts,
so servers that must know each other's URLs can be wired up with port 0 in tests.

Example::

    sock = bind_socket("127.0.0.1", 0)
    async with serve_asgi(app, sock) as base_url:
        ...  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import AsyncIterator, Generator

import uvicorn
from aiohttp import web
from uvicorn._types import ASGIApplication


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the process that embeds it.

    uvicorn installs its own SIGINT/SIGTERM handlers while serving and re-raises captured
    signals on exit; with several servers in one process (``opsbot dev``) they override each
    other and the command's own handler, and a Ctrl-C delivered twice (the terminal and ``uv
    run`` both send it) tore servers down mid-shutdown. The embedding command owns signals.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def stop(self) -> None:
        """Begin the shutdown now (uvicorn alone notices ``should_exit`` at its next tick)."""
        self.should_exit = True
        self._exit.set()

    async def main_loop(self) -> None:
        # uvicorn's loop, but woken by ``stop`` instead of polling every 0.1 s: each server
        # stopped up to 100 ms late (tests start and stop a few hundred of them).
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 0.1)
            should_exit = await self.on_tick(counter)


class PortInUseError(OSError):
    """The requested port is taken by another process."""


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket; ``port=0`` picks a free one. Raises ``PortInUseError``."""
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and accepted connections inherit it. Without it, Nagle + delayed ACK add ~40 ms to every
    # keep-alive request (uvicorn writes headers and body separately).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUseError(
                exc.errno, f"port {port} on {host} is already in use; choose another"
            ) from exc
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def socket_url(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://{host}:{port}"


@contextlib.asynccontextmanager
async def serve_asgi(
    app: ASGIApplication, sock: socket.socket, *, log_level: str = "warning"
) -> AsyncIterator[str]:
    """Run ``app`` on ``sock`` until the block exits; yields the base URL."""
    config = uvicorn.Config(app, log_level=log_level, lifespan="auto", access_log=False)
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # re-raise the start-up failure
                raise RuntimeError("server stopped during start-up")
            await asyncio.sleep(0.01)
        yield socket_url(sock)
    finally:
        server.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5)
        sock.close()


@contextlib.asynccontextmanager
async def serve_aiohttp(application: web.Application, sock: socket.socket) -> AsyncIterator[str]:
    """Serve an aiohttp ``application`` on ``sock`` until the block exits; yields the base
    URL. No access log (opsbot logs what matters itself) and no signal handlers: as with
    ``serve_asgi``, the embedding command owns signals."""
    runner = web.AppRunner(application, access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield socket_url(sock)
    finally:
        await runner.cleanup()
        sock.close()


def shutdown_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM, for a command's main wait.

    The handlers stay installed for the rest of the loop's life, so a repeated Ctrl-C during
    shutdown (a terminal and ``uv run`` both deliver it) only sets the event again.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def wait_for_shutdown() -> None:
    """Return on the first SIGINT or SIGTERM (see ``shutdown_event``)."""
    await shutdown_event().wait()
