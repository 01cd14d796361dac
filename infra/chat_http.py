"""The HTTP edge Slack's and Teams' servers share: a capped body, a terse refusal, a page for
a person's browser, and ``GET /oauth/callback``.

The callback is where the IdP sends a chat user back after an account link: Slack's server
mounts it (it also serves the Teams users when both platforms run), and Teams' server when
Teams runs alone; only the platform named on the pages differs. A failed link is a clear 400
page and one log line, never a traceback.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

log = logging.getLogger(__name__)

OAUTH_CALLBACK_PATH = "/oauth/callback"
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
    """The body, or a 413 refusal once it is announced or grows past ``limit`` bytes (chunked
    bodies too: nothing past the limit is buffered)."""
    if (request.content_length or 0) <= limit:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > limit:
                break
            chunks.append(chunk)
        else:
            return b"".join(chunks)
    return refuse(server_log, request, 413, "request body too large", request.content_length)


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
