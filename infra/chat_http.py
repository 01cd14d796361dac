"""The HTTP edge Slack's and Teams' servers share: a capped body, a terse refusal, a page for
a person's browser, and ``GET /oauth/callback``.

The callback is where the IdP sends a chat user back after an account link: Slack's server
mounts it (it also serves the Teams users when both platforms run), and Teams' server when
Teams runs alone; only the platform named on the pages differs. A failed link is a clear 400
page and one log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from infra.logging import quiet_bad_requests

log = logging.getLogger(__name__)
quiet_bad_requests()

OAUTH_CALLBACK_PATH = "/oauth/callback"
# A whole request body must arrive within this (Slack gives up on an answer after 3 s): a
# client that stalls mid-body holds a connection and a handler no longer.
BODY_SECONDS = 10.0
# Finishes an account link from the IdP's redirect (state, code, RFC 9207 iss) → who.
LinkCallback = Callable[[str, str, str | None], Awaitable[str]]
Handler = Callable[[web.Request], Awaitable[web.Response]]


def refuse(
    server_log: logging.Logger, request: web.Request, status: int, why: str, size: int | None
) -> web.Response:
    """One warning line on the server's own logger (no traceback) and a short plain answer
    that reveals nothing: only ``why`` up to its first colon reaches the caller."""
    server_log.warning(
        "%s %s refused with %d: %s (%s bytes)",
        request.method,
        request.path,
        status,
        why[:300],
        size,
    )
    return web.Response(status=status, text=why.split(":", 1)[0])


async def read_capped(
    server_log: logging.Logger, request: web.Request, limit: int
) -> bytes | web.Response:
    """The body, or the refusal to answer: 413 once it is announced or grows past ``limit``
    bytes (chunked bodies too: nothing past the limit is buffered), 400 when its
    ``Content-Encoding`` does not decode, 408 when it does not arrive within
    ``BODY_SECONDS``. A client gone mid-body is one line at INFO."""
    if (request.content_length or 0) > limit:
        return refuse(server_log, request, 413, "request body too large", request.content_length)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_SECONDS):
            async for chunk in request.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > limit:
                    return refuse(server_log, request, 413, "request body too large", size)
                chunks.append(chunk)
    except TimeoutError:
        refused = refuse(server_log, request, 408, "request body too slow", size)
        # Ends aiohttp's wait for the rest (it drains an unread body for up to 10 s).
        request.content.set_exception(web.RequestPayloadError("request body too slow"))
    except web.RequestPayloadError as exc:  # e.g. deflate that is not deflate
        refused = refuse(server_log, request, 400, f"malformed body: {exc}", size)
    except ConnectionResetError:
        server_log.info("%s %s: the client went away mid-body", request.method, request.path)
        return web.Response(status=400)  # nobody reads it
    else:
        return b"".join(chunks)
    refused.force_close()  # the rest of the body is not read: the connection cannot go on
    return refused


def html_page(status: int, message: str) -> web.Response:
    """A one-paragraph page for a person's browser (the message is escaped)."""
    body = f"<!doctype html><title>opsbot</title><p>{html.escape(message, quote=False)}</p>"
    return web.Response(status=status, text=body, content_type="text/html")


def link_callback_handler(link_callback: LinkCallback, *, platform: str, again: str) -> Handler:
    """The handler finishing a link started from ``platform``; ``again`` tells the person how
    to start a new link there when this one cannot finish."""

    async def callback(request: web.Request) -> web.Response:
        state, code = request.query.get("state", ""), request.query.get("code", "")
        if not state or not code:
            return html_page(400, f"This link is incomplete. {again}")
        try:
            who = await link_callback(state, code, request.query.get("iss"))
        except Exception as exc:
            # Mostly an expired or reused link (a person clicking twice): one line naming
            # the cause's type, not a traceback; never the state or the code. The traceback
            # is there at DEBUG for the rare bug.
            log.warning("account link could not be completed: %s", type(exc).__name__)
            log.debug("account link failure", exc_info=True)
            return html_page(400, f"This link has expired or was already used. {again}")
        return html_page(200, f"Connected as {who}. You can go back to {platform}.")

    return callback
