"""Starlette routes where an authorization server sends the browser back: ``/oauth/callback``
(account linking at the company IdP) and ``/oauth/mcp/callback`` (connecting an MCP server in
``oauth`` mode, ``mcp_oauth_routes``).

A chat adapter gives the user ``await linking.start(chat_user)`` (the IdP's login URL, carrying
a signed single-use state) as a button, and mounts these routes on the app's web server.

Example::

    app = Starlette(routes=link_routes(linking, on_linked=notify_chat))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from html import escape

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from broker.errors import BrokerError, InvalidStateError
from broker.linking import LinkingService, LinkResult
from broker.mcp_oauth_flow import McpOAuthService

OnLinked = Callable[[LinkResult], Awaitable[None]]


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title></head><body><h1>{escape(title)}</h1>"
        f"<p>{escape(body)}</p></body></html>",
        status,
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


Finish = Callable[[str, str, str | None], Awaitable[Response]]


def _callback(finish: Finish, ask_again: str) -> Callable[[Request], Awaitable[Response]]:
    """An endpoint for an authorization response: the checks and error pages both callbacks
    share; ``finish(state, code, iss)`` completes the flow and answers the success page."""

    async def callback(request: Request) -> Response:
        params = request.query_params
        if "error" in params:
            return _page("Not connected", "The sign-in was cancelled or refused.", 400)
        state, code = params.get("state"), params.get("code")
        if not state or not code:
            return _page("Not connected", "The sign-in response is incomplete.", 400)
        try:
            return await finish(state, code, params.get("iss"))
        except InvalidStateError as exc:
            return _page("Link expired or already used", f"{exc}. {ask_again}", 400)
        except BrokerError as exc:
            return _page("Not connected", str(exc), 502)

    return callback


def link_routes(linking: LinkingService, on_linked: OnLinked | None = None) -> list[Route]:
    """The callback route the IdP redirects to after login."""

    async def finish(state: str, code: str, iss: str | None) -> Response:
        result = await linking.complete(state, code, iss=iss)
        if on_linked is not None:
            await on_linked(result)
        who = result.link.email or result.link.subject
        return _page("Account connected", f"Connected as {who}. You can return to the chat.")

    callback = _callback(finish, "Ask opsbot for a new link.")
    return [Route("/oauth/callback", callback, methods=["GET"])]


MCP_OAUTH_CALLBACK_PATH = "/oauth/mcp/callback"


def mcp_oauth_routes(service: McpOAuthService) -> list[Route]:
    """The callback route of MCP servers' authorization servers (``oauth`` mode)."""

    async def finish(state: str, code: str, iss: str | None) -> Response:
        done = await service.complete(state, code, iss)
        return _page("Connected", f"opsbot can now use {done.server} for you. Return to the chat.")

    return [Route(MCP_OAUTH_CALLBACK_PATH, _callback(finish, "Ask opsbot again."), methods=["GET"])]
