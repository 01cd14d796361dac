"""Run the Bolt app: HTTP mode (aiohttp, ``POST /slack/events``) or Socket Mode.

Example::

    sock = bind_socket("0.0.0.0", port)
    async with serve_http(app, sock) as url:
        ...  # Slack posts to f"{url}/slack/events"
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from infra.serving import socket_url

EVENTS_PATH = "/slack/events"
OAUTH_CALLBACK_PATH = "/oauth/callback"
log = logging.getLogger(__name__)


# Finishes an account link from the IdP's redirect (state, code, RFC 9207 iss if sent) → who
# was connected.
LinkCallback = Callable[[str, str, str | None], Awaitable[str]]


def web_application(
    app: AsyncApp,
    link_callback: LinkCallback | None = None,
    *,
    routes: Sequence[web.RouteDef] = (),
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """The app's web server; ``routes``/``middlewares`` add operations endpoints
    (``/metrics``, ``/readyz``) and request metrics from ``opsbot.observability``."""

    async def events(request: web.Request) -> web.Response:
        bolt_response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    application = web.Application(middlewares=list(middlewares))
    application.add_routes(routes)
    application.router.add_post(EVENTS_PATH, events)
    application.router.add_get("/healthz", health)
    if link_callback is not None:
        application.router.add_get(OAUTH_CALLBACK_PATH, _oauth_callback(link_callback))
    return application


def _oauth_callback(
    link_callback: LinkCallback,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def callback(request: web.Request) -> web.Response:
        state, code = request.query.get("state", ""), request.query.get("code", "")
        if not state or not code:
            return _page(400, "This link is incomplete. Start again from Slack with /ops link.")
        try:
            who = await link_callback(state, code, request.query.get("iss"))
        except Exception:
            log.warning("account link could not be completed", exc_info=True)
            return _page(
                400,
                "This link has expired or was already used. Start again from Slack with /ops link.",
            )
        return _page(200, f"Connected as {who}. You can go back to Slack.")

    return callback


def _page(status: int, message: str) -> web.Response:
    body = f"<!doctype html><title>opsbot</title><p>{html.escape(message, quote=False)}</p>"
    return web.Response(status=status, text=body, content_type="text/html")


@contextlib.asynccontextmanager
async def serve_http(
    app: AsyncApp,
    sock: socket.socket,
    link_callback: LinkCallback | None = None,
    *,
    routes: Sequence[web.RouteDef] = (),
    middlewares: Sequence[Middleware] = (),
) -> AsyncIterator[str]:
    """Serve ``app`` on a pre-bound socket until the block exits; yields the base URL."""
    runner = web.AppRunner(
        web_application(app, link_callback, routes=routes, middlewares=middlewares),
        access_log=None,
        handle_signals=False,
    )
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
