"""Run the Bolt app: HTTP mode (aiohttp, ``POST /slack/events``) or Socket Mode.

Example::

    sock = bind_socket("0.0.0.0", port)
    async with serve_http(app, sock) as url:
        ...  # Slack posts to f"{url}/slack/events"
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypedDict, Unpack

from aiohttp import web
from aiohttp.typedefs import Middleware
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import (
    run_async_bolt_app,
    send_async_response,
)
from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import build_normalized_headers, extract_content_type
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from bot.slack.core import ConnectRefused, ServerConnected
from bot.slack.front import AckFront
from bot.slack.incoming import Ignored, Malformed, screen
from infra.ack import Front, on_ack_thread, on_main
from infra.chat_http import (
    OAUTH_CALLBACK_PATH,
    LinkCallback,
    html_page,
    link_callback_handler,
    read_capped,
    refuse,
)
from infra.gc_pacing import Traffic
from infra.loop_thread import on_loop
from infra.serving import serve_aiohttp

EVENTS_PATH = "/slack/events"
MCP_OAUTH_CALLBACK_PATH = "/oauth/mcp/callback"
# Slack's payloads are a few KB; a modal with 100 full blocks stays under 512 KiB.
DEFAULT_MAX_BODY_BYTES = 512 * 1024
SIGNATURE_MAX_AGE_SECONDS = 5 * 60
log = logging.getLogger(__name__)
_LINK_AGAIN = "Start again from Slack with /ops link."

# Finishes connecting an ``auth: oauth`` MCP server from its authorization server's redirect
# (``AssistantPort.complete_server_connect``, then the Slack prompt is updated).
ServerConnectCallback = Callable[
    [str, str, str | None], Awaitable[ServerConnected | ConnectRefused]
]


class WebOptions(TypedDict, total=False):
    """What the served web app adds to Slack's routes: ``web_application``'s keywords that
    ``serve_http`` passes on whole (so they are listed once; its defaults apply)."""

    routes: Sequence[web.RouteDef]
    middlewares: Sequence[Middleware]
    max_body_bytes: int
    server_connect: ServerConnectCallback | None


def web_application(
    app: AsyncApp,
    link_callback: LinkCallback | None = None,
    *,
    routes: Sequence[web.RouteDef] = (),
    middlewares: Sequence[Middleware] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    clock: Callable[[], float] = time.time,
    front: AckFront | None = None,
    dispatch: Callable[[AsyncBoltRequest], Awaitable[BoltResponse]] | None = None,
    server_connect: ServerConnectCallback | None = None,
) -> web.Application:
    """The app's web server; ``routes``/``middlewares`` add operations endpoints
    (``/metrics``, ``/readyz``) and request metrics from ``opsbot.observability``.

    ``POST /slack/events`` checks, in order, the body's size (413), Slack's signature and
    timestamp (401), and the payload (``bot.slack.incoming.screen``: 400 if malformed, an
    empty 200 if of a kind opsbot does not handle) before Bolt parses anything. Then
    ``front`` may accept a message itself (``bot.slack.front``); the rest goes to Bolt
    through ``dispatch`` (default: ``app.async_dispatch`` on this loop)."""
    secret = _signing_secret(app).encode()
    to_bolt = dispatch or app.async_dispatch

    async def events(request: web.Request) -> web.Response:
        raw = await read_capped(log, request, max_body_bytes)
        if isinstance(raw, web.Response):
            return raw
        headers = request.headers
        if not _signed(secret, raw, headers, clock()):
            return refuse(log, request, 401, "invalid or stale Slack signature", len(raw))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return refuse(log, request, 400, "malformed Slack body: not UTF-8", len(raw))
        # The content type exactly as Bolt will read it (not aiohttp's normalised one): a body
        # the screen took as JSON and Bolt as a form ran a hidden payload past every check.
        bolt_headers: dict[str, str | Sequence[str]] = dict(headers)
        screened = screen(text, extract_content_type(build_normalized_headers(bolt_headers)))
        if isinstance(screened, Ignored):
            log.info("ignored a Slack %s (not handled)", screened.kind)
            return web.Response(status=200, text="")
        if isinstance(screened, Malformed):
            return refuse(
                log, request, 400, f"malformed Slack {screened.kind}: {screened.problem}", len(raw)
            )
        if front is not None:
            accepted = await front.try_accept(screened.body)
            if accepted is not None:
                return accepted
        try:
            bolt_request = AsyncBoltRequest(
                body=text, query=request.query_string, headers=bolt_headers
            )
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # A shape the models above let through but Bolt cannot read: still the sender's.
            return refuse(
                log,
                request,
                400,
                f"malformed Slack {screened.kind}: {type(exc).__name__}",
                len(raw),
            )
        return await to_aiohttp_response(await to_bolt(bolt_request))

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    application = web.Application(middlewares=list(middlewares))
    application.add_routes(routes)
    application.router.add_post(EVENTS_PATH, events)
    application.router.add_get("/healthz", health)
    if link_callback is not None:
        application.router.add_get(
            OAUTH_CALLBACK_PATH,
            link_callback_handler(link_callback, platform="Slack", again=_LINK_AGAIN),
        )
    if server_connect is not None:
        application.router.add_get(MCP_OAUTH_CALLBACK_PATH, _server_connect(server_connect))
    return application


_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


def _signed(secret: bytes, raw: bytes, headers: Mapping[str, str], now: float) -> bool:
    """Slack's HMAC-SHA256 over ``v0:{timestamp}:{raw body}``, at most 5 minutes old, checked
    on the raw bytes (``SignatureVerifier`` decodes them first and raises on non-UTF-8)."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not _TIMESTAMP.fullmatch(timestamp) or not _SIGNATURE.fullmatch(signature):
        return False
    if abs(now - int(timestamp)) > SIGNATURE_MAX_AGE_SECONDS:
        return False
    base = b"v0:" + timestamp.encode() + b":" + raw
    expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def _signing_secret(app: AsyncApp) -> str:
    """The secret the Bolt app was built with (Bolt checks it again after the edge)."""
    secret = getattr(app, "_signing_secret", None)
    return secret if isinstance(secret, str) else ""


def _server_connect(
    finish: ServerConnectCallback,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``/oauth/mcp/callback``: a refused or stale connection is a clear page and one log
    line (no traceback); the state and code never reach the log."""

    async def callback(request: web.Request) -> web.Response:
        query = request.query
        if "error" in query:
            log.info("MCP server connection cancelled at the authorization server")
            return html_page(
                400, "The sign-in was cancelled or refused. Ask opsbot again in Slack."
            )
        state, code = query.get("state", ""), query.get("code", "")
        if not state or not code:
            log.warning("MCP server connection refused: incomplete callback")
            return html_page(400, "This link is incomplete. Ask opsbot again in Slack.")
        result = await finish(state, code, query.get("iss"))
        if isinstance(result, ConnectRefused):
            status = 400 if result.stale else 502
            log.warning("MCP server connection refused (%d): %s", status, result.reason[:200])
            return html_page(status, result.reason)
        return html_page(
            200, f"opsbot can now use {result.server} for you. You can go back to Slack."
        )

    return callback


@contextlib.asynccontextmanager
async def serve_http(
    app: AsyncApp,
    sock: socket.socket,
    link_callback: LinkCallback | None = None,
    *,
    front: AckFront | None = None,
    fronts: Sequence[Front] = (),
    **options: Unpack[WebOptions],
) -> AsyncIterator[str]:
    """Serve ``app`` on a pre-bound socket until the block exits; yields the base URL.

    With ``front`` (durable runs), HTTP is served on a thread and loop of its own
    (``slack-ack``), where ``front`` accepts messages; Bolt, the routes' handlers and the link
    callback still run on this (the calling) loop, reached from there. ``fronts`` (Teams'
    under ``opsbot serve``) are opened and serve their routes on that loop too."""
    if front is not None:
        async with _serve_on_ack_loop(app, sock, front, link_callback, fronts, options) as url:
            yield url
        return
    application = web_application(app, link_callback, **options)
    async with serve_aiohttp(application, sock) as url:
        yield url


@contextlib.asynccontextmanager
async def _serve_on_ack_loop(
    app: AsyncApp,
    sock: socket.socket,
    front: AckFront,
    link_callback: LinkCallback | None,
    fronts: Sequence[Front],
    options: WebOptions,
) -> AsyncIterator[str]:
    main = asyncio.get_running_loop()

    async def dispatch(request: AsyncBoltRequest) -> BoltResponse:
        return await on_loop(main, app.async_dispatch(request))

    callback: LinkCallback | None = None
    if link_callback is not None:
        linked = link_callback

        async def callback(state: str, code: str, iss: str | None) -> str:
            return await on_loop(main, linked(state, code, iss))  # type: ignore[arg-type]

    connect: ServerConnectCallback | None = None
    if (finish := options.get("server_connect")) is not None:

        async def connect(
            state: str, code: str, iss: str | None
        ) -> ServerConnected | ConnectRefused:
            return await on_loop(main, finish(state, code, iss))  # type: ignore[arg-type]

    # A GET handler reads only the request's URL: safe to run on the main loop.
    forwarded_routes = [
        web.RouteDef(r.method, r.path, on_main(main, r.handler), r.kwargs)
        for r in options.get("routes", ())
        if isinstance(r, web.RouteDef)
    ]
    # The same options, with the routes and the connect callback reaching the main loop.
    forwarded: WebOptions = {**options, "routes": forwarded_routes, "server_connect": connect}

    async def start(stack: contextlib.AsyncExitStack, traffic: Traffic) -> str:
        await stack.enter_async_context(front.opened(main))
        for other in fronts:
            await stack.enter_async_context(other.opened(main))
            forwarded_routes.extend(other.routes())
        counted: WebOptions = {
            **forwarded,
            "middlewares": [traffic.middleware, *forwarded.get("middlewares", ())],
        }
        application = web_application(app, callback, front=front, dispatch=dispatch, **counted)
        return await stack.enter_async_context(serve_aiohttp(application, sock))

    async with on_ack_thread("slack-ack", sock, start) as url:
        yield url


class ScreenedSocketModeHandler(AsyncSocketModeHandler):
    """Socket Mode with the HTTP edge's screening (``bot.slack.incoming.screen``): a
    malformed payload is acknowledged (Slack would only send it again) with one warning
    line, and a kind opsbot does not handle with one info line; Bolt sees neither."""

    async def handle(  # type: ignore[override]
        self, client: SocketModeClient, req: SocketModeRequest
    ) -> None:
        start = time.time()
        screened = screen(json.dumps(req.payload), "application/json")
        if isinstance(screened, Ignored):
            log.info("ignored a Slack %s over Socket Mode (not handled)", screened.kind)
            await client.send_socket_mode_response(SocketModeResponse(req.envelope_id))
            return
        if isinstance(screened, Malformed):
            log.warning(
                "Socket Mode %s %s ignored: malformed Slack %s: %s",
                req.type,
                req.envelope_id,
                screened.kind,
                screened.problem[:300],
            )
            await client.send_socket_mode_response(SocketModeResponse(req.envelope_id))
            return
        response = await run_async_bolt_app(self.app, req)
        await send_async_response(client, req, response, start)


async def run_socket_mode(app: AsyncApp, app_token: str, stop: asyncio.Event) -> None:
    """Hold a Socket Mode connection until ``stop`` is set."""
    handler = ScreenedSocketModeHandler(app, app_token)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await stop.wait()
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]
