"""The HTTP auth gate in front of each server's streamable-HTTP app.

Why our own gate in front of the SDK's auth middleware: the SDK answers every bad token with
the same 401 and cannot refuse a single tool by scope at the HTTP layer (a tool can only return
an error result). The gate:

- refuses a token in the query string (``?access_token=``) — 401 ``invalid_request``;
- answers a missing token with 401 and ``WWW-Authenticate: Bearer resource_metadata=...``
  (no error code, RFC 6750 §3.1), an unacceptable one with 401 ``invalid_token`` saying why;
- reads a POST's JSON-RPC body and, for ``tools/call`` of a tool whose scope the token lacks,
  answers 403 ``insufficient_scope`` with the needed ``scope`` (MCP authorization, scope
  challenge), before the SDK sees the call;
- serves RFC 9728 protected resource metadata listing every scope the server uses;
- answers ``/healthz`` (200, no token, no MCP session, any ``Host``: probes use the pod's
  address) before anything else;
- refuses a ``Host`` that is not allowed with 421 and a foreign browser ``Origin`` with 403
  (DNS-rebinding protection, ``mcp_servers.hosts``) before looking at any token.

The SDK's own bearer middleware still runs behind the gate (same verifier), so tools read the
caller with ``get_access_token()`` and sessions stay bound to the credential that opened them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infra.json_input import parse_json
from mcp_servers.auth import JwtVerifier, scopes_of
from mcp_servers.errors import JwksUnavailableError, TokenRejectedError

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000
HEALTH_PATH = "/healthz"


def resource_metadata_path(resource: str) -> str:
    """RFC 9728 §3.1: the well-known path with the resource's path appended."""
    path = urlparse(resource).path.rstrip("/")
    return f"/.well-known/oauth-protected-resource{path}"


def resource_metadata_url(resource: str) -> str:
    parsed = urlparse(resource)
    return f"{parsed.scheme}://{parsed.netloc}{resource_metadata_path(resource)}"


class AuthGate:
    """ASGI middleware; see the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        verifier: JwtVerifier,
        resource: str,
        authorization_servers: Sequence[str],
        tool_scopes: Mapping[str, str],
        resource_name: str,
        transport_security: TransportSecuritySettings,
    ) -> None:
        self.app = app
        self.resource_name = resource_name
        self.host_check = TransportSecurityMiddleware(transport_security)
        self.verifier = verifier
        self.resource = resource
        self.mcp_path = urlparse(resource).path.rstrip("/") or "/mcp"
        self.metadata_path = resource_metadata_path(resource)
        self.metadata_url = resource_metadata_url(resource)
        self.tool_scopes = tool_scopes
        self.metadata = {
            "resource": resource,
            "authorization_servers": list(authorization_servers),
            "scopes_supported": sorted(set(tool_scopes.values())),
            "bearer_methods_supported": ["header"],
            "resource_name": resource_name,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope["path"]).rstrip("/")
        if path == HEALTH_PATH and scope["method"] in ("GET", "HEAD"):
            await _send_json(send, 200, {"status": "ok", "server": self.resource_name})
            return
        refused = await self.host_check.validate_request(HTTPConnection(scope), is_post=False)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if path == self.metadata_path and scope["method"] in ("GET", "HEAD"):
            await _send_json(send, 200, self.metadata)
            return
        if path != self.mcp_path:
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "access_token" in query:
            await self._challenge(
                send, 401, "invalid_request", "access tokens are accepted only in the header"
            )
            return
        token = _bearer_token(scope)
        if token is None:
            await self._challenge(send, 401, None, "a bearer token is required")
            return
        try:
            claims = await self.verifier.verify(token)
        except TokenRejectedError as exc:
            logger.info("auth gate: refused a token: %s", exc)  # the reason, never the token
            await self._challenge(send, 401, "invalid_token", str(exc))
            return
        except JwksUnavailableError as exc:
            logger.warning("auth gate: %s", exc)
            await _send_json(send, 503, {"error": "temporarily_unavailable"})
            return
        if scope["method"] != "POST":
            with self.verifier.verified(token, claims):
                await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            await _send_json(send, 413, {"error": "request body too large"})
            return
        try:
            parsed = parse_json(body)
        except ValueError as exc:
            # Answered here: the SDK catches only JSONDecodeError, and a body that is not
            # UTF-8, nested past Python's stack or with an integer past its digit limit was
            # its 500 with a traceback.
            logger.info("auth gate: a body that is not JSON: %s", str(exc)[:120])
            await _send_json(send, 400, _PARSE_ERROR)
            return
        missing = self._missing_scope(parsed, set(scopes_of(claims)))
        if missing is not None:
            await self._challenge(
                send,
                403,
                "insufficient_scope",
                f"this tool needs the {missing!r} scope",
                scope_needed=missing,
            )
            return
        with self.verifier.verified(token, claims):
            await self.app(scope, _replay(body, receive), send)

    def _missing_scope(self, parsed: Any, granted: set[str]) -> str | None:
        messages = parsed if isinstance(parsed, list) else [parsed]
        for message in messages:
            if not isinstance(message, dict) or message.get("method") != "tools/call":
                continue
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            needed: str | None = self.tool_scopes.get(name) if isinstance(name, str) else None
            if needed is not None and needed not in granted:
                return needed
        return None

    async def _challenge(
        self,
        send: Send,
        status: int,
        error: str | None,
        description: str,
        *,
        scope_needed: str | None = None,
    ) -> None:
        parts = []
        if error is not None:
            parts += [f'error="{error}"', f'error_description="{description}"']
        if scope_needed is not None:
            parts.append(f'scope="{scope_needed}"')
        parts.append(f'resource_metadata="{self.metadata_url}"')
        body: dict[str, Any] = {"error": error or "unauthorized", "error_description": description}
        await _send_json(send, status, body, [(b"www-authenticate", _www(parts))])


# JSON-RPC 2.0's answer to a request that is not JSON (its id cannot be known).
_PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


def _www(parts: list[str]) -> bytes:
    return ("Bearer " + ", ".join(parts)).encode()


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            text = bytes(value).decode("latin-1")
            if text[:7].lower() == "bearer " and text[7:].strip():
                return text[7:].strip()
            return None
    return None


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _send_json(
    send: Send, status: int, body: Mapping[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
