"""Serving on the ack thread (``serve_fronts``), and what an ack front (Slack's
``bot.slack.front``, Teams' ``bot.teams.front``) answers when it could not store a delivery:
``503`` with ``Retry-After`` and one log line, never a 500.

Why 503 for every storage error: nothing was stored or marked seen, so the platform must
deliver the message again, and a 503 says "try later" where a 500 says "this request is
broken". Whatever failed (a dropped connection, a full disk, a locked SQLite file past its
wait), the same request can succeed later.

Example::

    try:
        first = await inbox.put(delivery)
    except Exception as exc:
        return not_stored(exc, event_id, platform="Slack")
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from aiohttp import web

from infra.gc_pacing import FullCollections, Traffic
from infra.loop_thread import LoopThread, on_loop
from infra.serving import serve_aiohttp
from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)

# Seconds a sender should wait before delivering again (Teams honours it; Slack retries on
# its own schedule, the header costs nothing there).
RETRY_AFTER_SECONDS = 5


def not_stored(exc: BaseException, what: str, *, platform: str) -> web.Response:
    """The answer for a delivery ``what`` that could not be stored because of ``exc``."""
    if is_connection_error(exc):
        log.warning(
            "database unavailable while accepting %s, answered 503 so %s redelivers: %s",
            what or "a message",
            platform,
            type(exc).__name__,
        )
    else:
        # One line, no traceback: the cause is in the exception's own text.
        log.error(
            "could not store %s, answered 503 so %s redelivers: %s: %s",
            what or "a message",
            platform,
            type(exc).__name__,
            str(exc).splitlines()[0][:300] if str(exc) else "",
        )
    return web.Response(status=503, text="", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


class Front(Protocol):
    """An ack front: opened on the ack loop (``main`` is the loop the agents run on), it
    serves its ``routes`` there."""

    def opened(self, main: asyncio.AbstractEventLoop) -> AbstractAsyncContextManager[Any]: ...

    def routes(self) -> Sequence[web.RouteDef]: ...


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def on_main(main: asyncio.AbstractEventLoop, handler: Handler) -> Handler:
    """``handler`` run on ``main`` for a request served on another loop. Safe for a handler
    that reads only the request's URL (GETs) or a body already read."""

    async def forwarded(request: web.Request) -> web.StreamResponse:
        return await on_loop(main, handler(request))  # type: ignore[arg-type]

    return forwarded


@contextlib.asynccontextmanager
async def serve_fronts(
    sock: socket.socket,
    fronts: Sequence[Front],
    *,
    routes: Sequence[web.RouteDef] = (),
    middlewares: Sequence[Any] = (),
    thread_name: str = "ack",
) -> AsyncIterator[str]:
    """Serve HTTP on ``sock`` from a thread and loop of its own: the fronts' routes there,
    ``routes`` forwarded to this (the calling) loop, the process's full garbage collections
    at that server's quiet moments. Yields the base URL."""
    main = asyncio.get_running_loop()

    async def start(stack: contextlib.AsyncExitStack, traffic: Traffic) -> str:
        served: list[web.RouteDef] = []
        for front in fronts:
            await stack.enter_async_context(front.opened(main))
            served.extend(front.routes())
        served.extend(
            web.RouteDef(r.method, r.path, on_main(main, r.handler), r.kwargs) for r in routes
        )
        application = web.Application(middlewares=[traffic.middleware, *middlewares])
        application.add_routes(served)
        return await stack.enter_async_context(serve_aiohttp(application, sock))

    async with on_ack_thread(thread_name, sock, start) as url:
        yield url


@contextlib.asynccontextmanager
async def on_ack_thread(
    thread_name: str,
    sock: socket.socket,
    start: Callable[[contextlib.AsyncExitStack, Traffic], Coroutine[Any, Any, str]],
) -> AsyncIterator[str]:
    """Run ``start`` (it serves ``sock`` with the ``Traffic``'s middleware first; what it
    opens goes on the stack) on a new thread's loop, with the short GIL switch interval and
    the process's full garbage collections at that server's quiet moments
    (``infra.gc_pacing``); close the stack there and ``sock`` at exit."""
    traffic = Traffic()

    async def begin(stack: contextlib.AsyncExitStack) -> str:
        url = await start(stack, traffic)
        await stack.enter_async_context(FullCollections(traffic))
        return url

    async with short_switch_interval(), LoopThread(thread_name) as thread:
        stack = contextlib.AsyncExitStack()
        try:
            url = await thread.run(begin(stack))
            freeze_start_up()
            yield url
        finally:
            await thread.run(stack.aclose())
            sock.close()


@contextlib.asynccontextmanager
async def serve_here(
    sock: socket.socket, routes: Sequence[web.RouteDef], middlewares: Sequence[Any] = ()
) -> AsyncIterator[str]:
    """Serve ``routes`` on ``sock`` from this loop (no ack thread). Yields the base URL."""
    application = web.Application(middlewares=list(middlewares))
    application.add_routes(routes)
    async with serve_aiohttp(application, sock) as url:
        yield url


def freeze_start_up() -> None:
    """Start-up is over once the ack server listens: the modules, settings, clients and
    graphs it built live as long as the process. ``gc.freeze`` moves them to the permanent
    generation, so a full collection no longer walks them. Why: a full collection holds the
    GIL for all of it (~275k objects after start-up, 0.1-0.4 s on this 2-core box), and the
    ack loop stood still that long whenever agent turns' garbage triggered one. (No
    collection first: it would cost that pause once more, for a little start-up garbage.)"""
    gc.freeze()


# A thread waiting for the GIL asks the holder to let go after the switch interval. The ack
# thread waits for it after every socket read and every database round trip, while the main
# thread runs agent steps: 0.2 ms instead of Python's 5 ms keeps those waits short. Threads
# that do not contend are not switched any more often. Measured with `bench slack_ack --n 100
# --burst 50 --with-agent --db sqlite` (one process, 2 vCPU AMD EPYC), seven runs each,
# interleaved: with 1 ms the ack p99 was 40-94 ms (median 74, 1 of 7 within 50 ms); with
# 0.2 ms 38-52 ms (median 45, 6 of 7), the 270 turns drained 4 % slower.
ACK_SWITCH_INTERVAL = 0.0002


@contextlib.asynccontextmanager
async def short_switch_interval() -> AsyncIterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, ACK_SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
