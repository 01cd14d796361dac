"""Run the Bolt app: HTTP mode (aiohttp, ``POST /slack/events``) or Socket Mode.

Example::

    sock = bind_socket("0.0.0.0", port)
    async with serve_http(app, sock) as url:
        ...  # Slack posts to f"{url}/slack/events"
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from opsbot.serving import socket_url

EVENTS_PATH = "/slack/events"


def web_application(app: AsyncApp) -> web.Application:
    async def events(request: web.Request) -> web.Response:
        bolt_response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    application = web.Application()
    application.router.add_post(EVENTS_PATH, events)
    application.router.add_get("/healthz", health)
    return application


@contextlib.asynccontextmanager
async def serve_http(app: AsyncApp, sock: socket.socket) -> AsyncIterator[str]:
    """Serve ``app`` on a pre-bound socket until the block exits; yields the base URL."""
    runner = web.AppRunner(web_application(app), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        yield socket_url(sock)
    finally:
        await runner.cleanup()
        sock.close()


async def run_socket_mode(app: AsyncApp, app_token: str, stop: asyncio.Event) -> None:
    """Hold a Socket Mode connection until ``stop`` is set."""
    handler = AsyncSocketModeHandler(app, app_token)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
